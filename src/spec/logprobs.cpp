// Log-probabilities of a logits row (logprobs.h).
#include "spec/logprobs.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tandem {

TokenLogprobs token_logprobs(const float* row, int64_t vocab, int32_t chosen, int top_n) {
  TANDEM_CHECK(chosen >= 0 && chosen < vocab, "logprobs: token {} outside [0, {})", chosen, vocab);
  TANDEM_CHECK(top_n >= 0 && top_n <= kMaxTopLogprobs, "logprobs: top {} outside [0, {}]", top_n,
               kMaxTopLogprobs);
  const float m = *std::max_element(row, row + vocab);
  const float at = row[chosen];
  double sum = 0.0;
  int32_t above = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    sum += std::exp(static_cast<double>(row[i]) - m);
    above += row[i] > at ? 1 : 0;
  }
  const double lse = m + std::log(sum);
  auto logprob = [&](int32_t i) { return static_cast<float>(row[i] - lse); };
  TokenLogprobs out{.chosen = {chosen, logprob(chosen), above + 1}};
  if (top_n > 0) {  // one pass keeping the n best so far (no vocab-sized index per token)
    const auto n = static_cast<size_t>(std::min<int64_t>(top_n, vocab));
    auto better = [&](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    };
    std::vector<int32_t> best;
    best.reserve(n + 1);
    for (int32_t i = 0; i < vocab; ++i) {
      if (best.size() == n && !better(i, best.back())) continue;
      best.insert(std::upper_bound(best.begin(), best.end(), i,
                                   [&](int32_t a, int32_t b) { return better(a, b); }),
                  i);
      if (best.size() > n) best.pop_back();
    }
    // A token above one of the n best is among them, before it.
    for (size_t j = 0; j < best.size(); ++j) {
      int32_t rank = 1;
      for (size_t b = 0; b < j; ++b) rank += row[best[b]] > row[best[j]] ? 1 : 0;
      out.top.push_back({best[j], logprob(best[j]), rank});
    }
  }
  return out;
}

}  // namespace tandem
