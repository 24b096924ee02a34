// Penalties on a logits row (penalties.h).
#include "spec/penalties.h"

#include <algorithm>
#include <limits>

namespace tandem {

PenaltyState::PenaltyState(const SamplingParams& p, std::span<const int32_t> prompt,
                           std::span<const int32_t> stop_ids)
    : presence_(p.presence_penalty),
      frequency_(p.frequency_penalty),
      repetition_(p.repetition_penalty),
      bias_(p.logit_bias),
      min_tokens_(p.min_tokens),
      stop_ids_(stop_ids.begin(), stop_ids.end()),
      prompt_(prompt.begin(), prompt.end()) {}

void PenaltyState::apply(float* row, int64_t vocab, std::span<const int32_t> pending) const {
  for (const auto& [t, b] : bias_) {
    if (t >= 0 && t < vocab) row[t] += b;
  }
  // Without copying the prompt or the counts: a token's output count is its committed count plus
  // its occurrences among the (at most k) pending drafts, and each token is penalised once.
  auto pending_count = [&](int32_t t) {
    return static_cast<int64_t>(std::count(pending.begin(), pending.end(), t));
  };
  auto first_in_pending = [&](size_t i) {
    return std::find(pending.begin(), pending.end(), pending[i]) == pending.begin() + i;
  };
  auto committed = [&](int32_t t) { return output_counts_.contains(t); };
  auto penalise = [&](int32_t t, int64_t n, bool in_prompt) {
    if (t < 0 || t >= vocab) return;
    if (repetition_ != 1.f && (in_prompt || n > 0)) {
      row[t] = row[t] > 0.f ? row[t] / repetition_ : row[t] * repetition_;
    }
    if (n > 0) row[t] -= frequency_ * static_cast<float>(n) + presence_;
  };
  // The prompt matters to the repetition penalty alone; without it, only output tokens change.
  const bool by_prompt = repetition_ != 1.f;
  auto done_by_prompt = [&](int32_t t) { return by_prompt && prompt_.contains(t); };
  if (by_prompt) {
    for (int32_t t : prompt_) {
      penalise(t, (committed(t) ? output_counts_.at(t) : 0) + pending_count(t), true);
    }
  }
  for (const auto& [t, n] : output_counts_) {
    if (!done_by_prompt(t)) penalise(t, n + pending_count(t), false);
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    const int32_t t = pending[i];
    if (first_in_pending(i) && !done_by_prompt(t) && !committed(t)) {
      penalise(t, pending_count(t), false);
    }
  }
  // The row chooses output token n_output_ + pending.size() (0-based): a stop id there would end
  // generation with fewer than min_tokens tokens.
  if (n_output_ + static_cast<int64_t>(pending.size()) < min_tokens_) {
    for (int32_t t : stop_ids_) {
      if (t >= 0 && t < vocab) row[t] = -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace tandem
