// Greedy and coupled-sampling acceptance.
#include "spec/acceptance.h"

#include "core/error.h"

namespace tandem {

Verdict accept_each(std::span<const int32_t> drafts, const std::function<int32_t(int)>& choose) {
  const int k = static_cast<int>(drafts.size());
  Verdict v;
  for (int j = 0; j <= k; ++j) {
    const int32_t tok = choose(j);
    v.target_tokens.push_back(tok);
    v.emitted.push_back(tok);  // an accepted draft equals the target's token
    if (j == k || tok != drafts[j]) break;
  }
  v.n_acc = static_cast<int>(v.emitted.size());
  return v;
}

Verdict accept_sampled(const Tensor& logits, std::span<const int32_t> drafts,
                       const SamplingParams& p, int64_t first_position) {
  const int64_t vocab = logits.dim(1);
  TANDEM_CHECK(logits.dim(0) >= static_cast<int64_t>(drafts.size()) + 1,
               "accept: {} logits rows for {} drafts", logits.dim(0), drafts.size());
  return accept_each(drafts, [&](int j) {
    const float* row = logits.data<const float>() + j * logits.stride(0);
    return draw(target_distribution(row, vocab, p), uniform_at(p.seed, first_position + j));
  });
}

Verdict accept_greedy(std::span<const int32_t> target_argmax, std::span<const int32_t> drafts) {
  TANDEM_CHECK(target_argmax.size() >= drafts.size() + 1,
               "accept_greedy: {} target tokens for {} drafts", target_argmax.size(),
               drafts.size());
  return accept_each(drafts, [&](int j) { return target_argmax[j]; });
}

}  // namespace tandem
