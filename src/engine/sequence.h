// The engine's record of one request while it runs: its phase, its hold on the state pools, what
// it generated, and its statistics. Internal to the engine (scheduler and executor).
#pragma once

#include <memory>
#include <optional>

#include "cache/sequence_cache.h"
#include "cache/state_pool.h"
#include "engine/request.h"
#include "spec/json_constraint.h"
#include "spec/penalties.h"

namespace tandem {

enum class Phase {
  kWaiting,   // not admitted: holds no slot or block
  kPrefill,   // admitted; prompt rows [0, prefilled) have run
  kDecode,    // the prompt has run; generating
  kSwapped,   // preempted: its state is in host memory (swapped), resumed in `resume_phase`
  kFinished,  // done or cancelled; released
};

struct Sequence {
  RequestId id = -1;
  Request req;
  int64_t order = 0;  // admission order (arrival)
  Phase phase = Phase::kWaiting;
  Phase resume_phase = Phase::kPrefill;
  SequenceCache cache;
  std::unique_ptr<SwappedState> swapped;
  int64_t prefilled = 0;
  std::vector<int32_t> generated;
  int32_t last = -1;      // the last emitted token: row 0 of the next verify step
  bool drafting = false;  // the drafter follows it (from admission to the end)
  GenerationStats stats;
  PenaltyState penalties;  // when req.sampling.adjusts_logits(): the output's token counts
  std::optional<JsonConstraint> json;          // when req.json_object: the grammar's state
  std::vector<TokenLogprobs> prompt_logprobs;  // req.prompt_logprobs: gathered chunk by chunk
  double admitted_at = 0, first_token_at = 0;
  std::string finish_reason;

  int64_t prompt_len() const { return static_cast<int64_t>(req.prompt.size()); }
  // Greedy choices without penalties or logprobs need only the device's argmax ids.
  bool needs_host_logits() const {
    return !req.sampling.greedy() || req.sampling.adjusts_logits() || req.logprobs >= 0 ||
           req.json_object;
  }
};

}  // namespace tandem
