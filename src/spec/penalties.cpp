// Penalties on a logits row (penalties.h).
#include "spec/penalties.h"

#include <algorithm>
#include <vector>

namespace tandem {

PenaltyState::PenaltyState(const SamplingParams& p, std::span<const int32_t> prompt)
    : presence_(p.presence_penalty),
      frequency_(p.frequency_penalty),
      repetition_(p.repetition_penalty),
      prompt_(prompt.begin(), prompt.end()) {}

void PenaltyState::apply(float* row, int64_t vocab, std::span<const int32_t> pending) const {
  std::unordered_map<int32_t, int64_t> counts = output_counts_;
  for (int32_t t : pending) ++counts[t];
  auto valid = [vocab](int32_t t) { return t >= 0 && t < vocab; };
  if (repetition_ != 1.f) {
    // Each token once, whether it is in the prompt, the output or both.
    std::vector<int32_t> seen(prompt_.begin(), prompt_.end());
    for (const auto& [t, n] : counts) {
      if (!prompt_.contains(t)) seen.push_back(t);
    }
    for (int32_t t : seen) {
      if (!valid(t)) continue;
      row[t] = row[t] > 0.f ? row[t] / repetition_ : row[t] * repetition_;
    }
  }
  if (frequency_ != 0.f || presence_ != 0.f) {
    for (const auto& [t, n] : counts) {
      if (!valid(t)) continue;
      row[t] -= frequency_ * static_cast<float>(n) + presence_;
    }
  }
}

}  // namespace tandem
