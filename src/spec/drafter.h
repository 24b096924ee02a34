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
  // A new sequence starts (its prefill follows): forget everything about the previous one.
  virtual void begin_sequence() {}
  // Called right after every target step (prefill chunk or verify) while the target's hidden rows
  // are still in place: row j of the step had input position start + j, and next_tokens[j] is the
  // token that follows it (the next prompt token, an accepted draft, or the token just emitted).
  // Only the n valid rows are passed (rejected draft rows are not).
  virtual void after_target_step(SequenceState& st, std::span<const int32_t> next_tokens,
                                 int64_t start) = 0;
  // Runs any work deferred for the rows passed so far (the MTP first pass) now. The generator
  // calls it after the prompt, so that the first decode step does not pay for the prompt.
  virtual void catch_up(SequenceState& /*st*/) {}
  // Up to k drafts following the last emitted token; `emitted` is everything generated so far.
  virtual std::vector<int32_t> propose(SequenceState& st, int k,
                                       std::span<const int32_t> emitted) = 0;
};

}  // namespace tandem
