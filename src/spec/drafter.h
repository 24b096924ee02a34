// Drafter: proposes up to k tokens for each sequence of a step. All drafters share one verify
// path (engine/batch_engine.cpp); a drafter only sees what the target processed and emitted.
// Sequences are named by an id that stays the same for their life (their cache slot may change
// when they are preempted and resumed).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/sequence_cache.h"
#include "model/step.h"

namespace tandem {

using SeqId = int64_t;

// What a drafter may bind to at start-up.
struct DrafterSetup {
  const CacheViews* cache = nullptr;  // the pools (the MTP layer's KV lives in cache->mtp)
  int64_t block_size = 64;
  int64_t table_width = 0;  // block-table entries per sequence
  int32_t scratch_block = 0;
  int32_t scratch_slot = 0;
  int64_t max_seqs = 1;  // sequences resident or swapped at once
  int k_max = 0;         // no request asks for more drafts
  bool cuda_graphs = false;
};

// One sequence's rows of the target step that just ran, while the model's hidden rows are still in
// place: rows [row, row + next_tokens.size()) of Qwen35Model::hidden(), the first at position
// `start`; next_tokens[j] is the token that follows row j (the next prompt token, an accepted
// draft, or the token just emitted). Only valid rows are passed (rejected draft rows are not).
struct TargetRows {
  SeqId seq;
  const SequenceCache* cache;  // its block table
  int64_t row;
  int64_t start;
  std::span<const int32_t> next_tokens;
};

struct DraftAsk {
  SeqId seq;
  const SequenceCache* cache;
  int k;                             // drafts wanted, >= 1
  std::span<const int32_t> emitted;  // everything the sequence generated so far
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Called once, before any sequence.
  virtual void prepare(const DrafterSetup& /*setup*/) {}
  virtual void begin_sequence(SeqId /*seq*/) {}
  virtual void end_sequence(SeqId /*seq*/) {}
  // Called right after every target step (prefill chunks and verify steps), for its sequences.
  virtual void after_target_step(std::span<const TargetRows> rows) = 0;
  // Runs deferred work (the MTP first pass) for these sequences now, except for the last
  // keep_rows rows of each, so that a drafting step's cost is what a step of a run of drafting
  // steps costs (speculation control). At most max_rows rows of each sequence run, the most recent
  // ones; older deferred rows are dropped, which may make later drafts worse (never what a
  // sequence emits: drafts only decide what verification accepts).
  virtual void catch_up(std::span<const SeqId> /*seqs*/, int64_t /*keep_rows*/,
                        int64_t /*max_rows*/) {}
  // Up to ask.k drafts for each ask (the same order).
  virtual std::vector<std::vector<int32_t>> propose(std::span<const DraftAsk> asks) = 0;
};

}  // namespace tandem
