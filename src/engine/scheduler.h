// Continuous batching (issue 14 item 5): which sequences run in the next step and how many rows
// each gets. Requests join and leave at step boundaries. Every step runs all resident decoding
// sequences first (each 1 + k rows, k the step's draft depth), then prefill chunks within the
// step's token budget (--max-num-batched-tokens). A chunk ends at a multiple of the granule counted
// from the sequence start (or at the prompt's end), so a row's GDN chunk and every kernel's work
// split never depend on the budget or on other requests (DESIGN.md invariant 2). When a decoding
// sequence cannot get the blocks its step needs, the most recently admitted resident sequence is
// preempted: its state is swapped to host memory (bit-exact) and swapped back in, ahead of new
// admissions, when slots and blocks allow. New requests wait while slots or blocks are short.
// With a prefix cache (prefix_cache.h) a request is admitted from its longest kept prompt prefix,
// and a chunk that would pass the point where its prompt's prefix is kept ends there.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "cache/state_pool.h"
#include "engine/prefix_cache.h"
#include "engine/sequence.h"

namespace tandem {

struct SchedulerConfig {
  int64_t max_num_seqs = 8;
  int64_t max_num_batched_tokens = 512;
  int64_t max_model_len = 4096;
  int64_t granule = 64;  // prefill chunk boundaries (the GDN chunk size)
  // Prompt rows a step may give sequences that read every prompt row's logits
  // (Request::prompt_logprobs): the engine's logits buffer holds this many besides the others.
  int64_t prompt_logit_rows = 64;
};

struct PrefillChunk {
  Sequence* seq;
  int64_t start, rows;
  bool last() const { return start + rows == seq->prompt_len(); }
};

struct ScheduledStep {
  std::vector<Sequence*> decode;  // resident, kDecode, in admission order
  std::vector<PrefillChunk> prefill;
  std::vector<Sequence*> preempted;  // swapped out by this schedule
  bool empty() const { return decode.empty() && prefill.empty(); }
};

class Scheduler {
 public:
  // prefix: the prefix cache, or null (none).
  Scheduler(SchedulerConfig cfg, StatePool& pool, PrefixCache* prefix = nullptr);

  void add(Sequence* seq);     // a new request: waits for admission
  void remove(Sequence* seq);  // finished or cancelled: releases what it holds
  // The next step, for decoding sequences taking `decode_rows` rows each (1 + drafts).
  ScheduledStep schedule(int64_t decode_rows);
  bool idle() const { return resident_.empty() && waiting_.empty() && swapped_.empty(); }
  int64_t running() const { return static_cast<int64_t>(resident_.size()); }
  int64_t decoding() const;  // resident sequences past their prompt
  // Whether the next step is likely to carry prefill rows: a resident sequence is mid-prompt, a
  // preempted one may come back, or the first waiting request can be admitted (admissible, with
  // the token budget a plain step leaves).
  bool prefill_pending() const;
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size() + swapped_.size()); }
  const SchedulerConfig& config() const { return cfg_; }
  // Rows of a prefill chunk starting at `start` under `budget` (0: none fits).
  int64_t chunk_rows(int64_t start, int64_t prompt_len, int64_t budget) const;

 private:
  // Whether the first waiting request can be admitted now with a chunk under `budget` rows: a free
  // slot, room under max_num_seqs, blocks for the chunk, nothing swapped out ahead of it.
  bool admissible(const Sequence* s, int64_t budget, int64_t logit_budget) const;
  // A chunk's budget: `budget`, and for a sequence reading its prompt's logits at most
  // logit_budget (SchedulerConfig::prompt_logit_rows left this step).
  int64_t chunk_budget(const Sequence* s, int64_t budget, int64_t logit_budget) const;
  void preempt(Sequence* victim);
  bool swap_in(Sequence* seq);
  // Admission from the prefix cache: the longest kept prefix of s's prompt restored into a fresh
  // slot and blocks, with room for the chunk after it under `budget`; its length (0: none, s holds
  // nothing).
  int64_t restore_prefix(Sequence* s, int64_t budget);
  // rows of a chunk from `start`, ended where s's prompt prefix is to be kept (prefix cache).
  int64_t end_at_snapshot(const Sequence* s, int64_t start, int64_t rows) const;

  SchedulerConfig cfg_;
  StatePool& pool_;
  PrefixCache* prefix_;
  std::vector<Sequence*> resident_;  // admission order
  std::deque<Sequence*> waiting_;
  std::deque<Sequence*> swapped_;  // preemption order
};

}  // namespace tandem
