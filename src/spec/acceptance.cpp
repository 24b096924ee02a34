// Greedy and coupled-sampling acceptance.
#include "spec/acceptance.h"

#include "core/error.h"

namespace tandem {

Verdict accept_sampled(const Tensor& logits, std::span<const int32_t> drafts,
                       const SamplingParams& p, int64_t first_position) {
  const int64_t vocab = logits.dim(1);
  const int k = static_cast<int>(drafts.size());
  TANDEM_CHECK(logits.dim(0) >= k + 1, "accept: {} logits rows for {} drafts", logits.dim(0), k);
  Verdict v;
  for (int j = 0; j <= k; ++j) {
    const float* row = logits.data<const float>() + j * logits.stride(0);
    const int32_t tok =
        draw(target_distribution(row, vocab, p), uniform_at(p.seed, first_position + j));
    v.target_tokens.push_back(tok);
    v.emitted.push_back(tok);  // an accepted draft equals the target's sample
    if (j == k || tok != drafts[j]) break;
  }
  v.n_acc = static_cast<int>(v.emitted.size());
  return v;
}

Verdict accept_greedy(std::span<const int32_t> target_argmax, std::span<const int32_t> drafts) {
  const size_t k = drafts.size();
  TANDEM_CHECK(target_argmax.size() >= k + 1, "accept_greedy: {} target tokens for {} drafts",
               target_argmax.size(), k);
  Verdict v;
  for (size_t j = 0; j <= k; ++j) {
    const int32_t tok = target_argmax[j];
    v.target_tokens.push_back(tok);
    v.emitted.push_back(tok);  // an accepted draft equals the target's token
    if (j == k || tok != drafts[j]) break;
  }
  v.n_acc = static_cast<int>(v.emitted.size());
  return v;
}

}  // namespace tandem
