// Greedy and rejection-sampling acceptance.
#include "spec/acceptance.h"

#include "kernels/argmax/argmax.h"

namespace tandem {

Verdict accept(const Tensor& logits, std::span<const int32_t> drafts, const SamplingParams& p,
               std::mt19937_64& rng) {
  const int64_t vocab = logits.dim(1);
  const int k = static_cast<int>(drafts.size());
  TANDEM_CHECK(logits.dim(0) == k + 1, "accept: {} logits rows for {} drafts", logits.dim(0), k);
  Verdict v;
  for (int j = 0; j <= k; ++j) {
    const float* row = logits.data<const float>() + j * logits.stride(0);
    int32_t tok;
    bool accepted = false;
    if (p.greedy()) {
      tok = kernels::ref::argmax_row(row, vocab);
      accepted = j < k && tok == drafts[j];
    } else {
      std::vector<float> dist = target_distribution(row, vocab, p);
      if (j < k) {
        const double u = uniform01(rng);
        accepted = u < static_cast<double>(dist[drafts[j]]);
        if (!accepted) dist[drafts[j]] = 0.f;  // residual of p against a one-hot proposal
      }
      tok = accepted ? drafts[j] : draw(dist, rng);
    }
    v.target_tokens.push_back(tok);
    v.emitted.push_back(accepted ? drafts[j] : tok);
    if (!accepted) break;
  }
  v.n_acc = static_cast<int>(v.emitted.size());
  return v;
}

Verdict accept_greedy(std::span<const int32_t> target_argmax, std::span<const int32_t> drafts) {
  const size_t k = drafts.size();
  TANDEM_CHECK(target_argmax.size() == k + 1, "accept_greedy: {} target tokens for {} drafts",
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
