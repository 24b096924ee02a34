// Drafter: proposes up to k tokens to follow the last emitted token. All drafters share one verify
// path (engine/generator.cpp); a drafter only sees what the target processed and emitted.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "cache/sequence_state.h"

namespace tandem {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Called once by the generator right after it creates its state, before any sequence: st is the
  // state that every later call passes, and no step asks for more than k_max drafts. A drafter may
  // bind device work to st's buffers here (MtpDrafter captures CUDA graphs of its forwards when
  // cuda_graphs is set and the model runs on CUDA).
  virtual void prepare(SequenceState& /*st*/, int /*k_max*/, bool /*cuda_graphs*/) {}
  // A new sequence starts (its prefill follows): forget everything about the previous one.
  virtual void begin_sequence() {}
  // Called right after every target step (prefill chunk or verify) while the target's hidden rows
  // are still in place: row j of the step had input position start + j, and next_tokens[j] is the
  // token that follows it (the next prompt token, an accepted draft, or the token just emitted).
  // Only the n valid rows are passed (rejected draft rows are not).
  virtual void after_target_step(SequenceState& st, std::span<const int32_t> next_tokens,
                                 int64_t start) = 0;
  // Runs any work deferred for the rows passed so far (the MTP first pass) now, except for the last
  // keep_rows of them. The generator calls it after the prompt, so that the first decode step does
  // not pay for the prompt, and when it drafts after k = 0 steps with keep_rows = 1 (the last
  // step's row), so that the drafting step itself costs what such a step costs in a run of them.
  virtual void catch_up(SequenceState& /*st*/, int64_t /*keep_rows*/ = 0) {}
  // Up to k drafts following the last emitted token; `emitted` is everything generated so far.
  virtual std::vector<int32_t> propose(SequenceState& st, int k,
                                       std::span<const int32_t> emitted) = 0;
};

}  // namespace tandem
