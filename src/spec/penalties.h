// Logit bias and presence, frequency and repetition penalties (SamplingParams), applied to a
// logits row before the target distribution, in vLLM's order: the bias first (logit += bias),
// then repetition (every token of the prompt or the output: a positive logit divided by r, a
// negative one multiplied by r), then frequency and presence over the output's counts
// (logit -= frequency * count + presence * [count > 0]); while fewer than min_tokens tokens are
// output, the stop ids' logits are -inf (whatever the order: -inf stays -inf under all of these).
// A verify row j sees the output as committed plus the step's drafts 1..j: when those drafts are
// accepted they are the output plain decoding would have, so penalised output stays exact under
// speculation.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "spec/sampler.h"

namespace tandem {

class PenaltyState {
 public:
  PenaltyState() = default;
  // stop_ids: the request's stop tokens, masked while fewer than p.min_tokens are output.
  PenaltyState(const SamplingParams& p, std::span<const int32_t> prompt,
               std::span<const int32_t> stop_ids = {});

  // row: f32 [vocab], changed in place; pending: output tokens after the committed ones.
  void apply(float* row, int64_t vocab, std::span<const int32_t> pending) const;
  void add(int32_t token) {  // one committed output token
    ++output_counts_[token];
    ++n_output_;
  }

 private:
  float presence_ = 0.f, frequency_ = 0.f, repetition_ = 1.f;
  std::vector<std::pair<int32_t, float>> bias_;
  int64_t min_tokens_ = 0, n_output_ = 0;
  std::vector<int32_t> stop_ids_;
  std::unordered_set<int32_t> prompt_;
  std::unordered_map<int32_t, int64_t> output_counts_;
};

}  // namespace tandem
