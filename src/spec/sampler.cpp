// Target distribution and position-keyed draws for seeded sampling.
#include "spec/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "kernels/argmax/argmax.h"

namespace tandem {

void check_sampling_params(const SamplingParams& p) {
  TANDEM_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.f,
               "temperature must be >= 0, got {}", p.temperature);
  TANDEM_CHECK(p.top_k >= 0, "top_k must be >= 0, got {}", p.top_k);
  TANDEM_CHECK(p.top_p > 0.f && p.top_p <= 1.f, "top_p must be in (0, 1], got {}", p.top_p);
  TANDEM_CHECK(p.min_p >= 0.f && p.min_p <= 1.f, "min_p must be in [0, 1], got {}", p.min_p);
  TANDEM_CHECK(p.min_tokens >= 0, "min_tokens must be >= 0, got {}", p.min_tokens);
  TANDEM_CHECK(std::isfinite(p.presence_penalty) && std::abs(p.presence_penalty) <= 2.f,
               "presence_penalty must be in [-2, 2], got {}", p.presence_penalty);
  TANDEM_CHECK(std::isfinite(p.frequency_penalty) && std::abs(p.frequency_penalty) <= 2.f,
               "frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty);
  TANDEM_CHECK(p.repetition_penalty > 0.f && p.repetition_penalty <= 2.f,
               "repetition_penalty must be in (0, 2], got {}", p.repetition_penalty);
  for (const auto& [token, bias] : p.logit_bias) {
    TANDEM_CHECK(token >= 0 && std::isfinite(bias) && std::abs(bias) <= 100.f,
                 "logit_bias: token {} with bias {} (a token id >= 0 and a bias in [-100, 100])",
                 token, bias);
  }
}

std::vector<float> target_distribution(const float* logits, int64_t vocab,
                                       const SamplingParams& p) {
  std::vector<float> dist(vocab, 0.f);
  if (p.greedy()) {
    dist[kernels::ref::argmax_row(logits, vocab)] = 1.f;
    return dist;
  }
  // Order by logit (descending, ties by index) to apply top-k and top-p.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int64_t keep = p.top_k > 0 ? std::min<int64_t>(p.top_k, vocab) : vocab;
  const double m = logits[order[0]];
  std::vector<double> e(keep);
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) sum += e[i] = std::exp((logits[order[i]] - m) / p.temperature);
  if (p.min_p > 0.f) {  // p_i / p_max = e_i, non-increasing along the order: a prefix stays
    while (keep > 1 && e[keep - 1] < p.min_p) --keep;
    sum = std::accumulate(e.begin(), e.begin() + keep, 0.0);
  }
  if (p.top_p < 1.f) {  // smallest prefix whose mass reaches top_p
    double cum = 0.0;
    int64_t n = 0;
    while (n < keep) {
      cum += e[n++] / sum;
      if (cum >= p.top_p) break;
    }
    keep = n;
    sum = std::accumulate(e.begin(), e.begin() + keep, 0.0);
  }
  for (int64_t i = 0; i < keep; ++i) dist[order[i]] = static_cast<float>(e[i] / sum);
  return dist;
}

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

double uniform_at(uint64_t seed, int64_t position) {
  const uint64_t h = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(position));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

int32_t draw(const std::vector<float>& dist, double u01) {
  const double total = std::accumulate(dist.begin(), dist.end(), 0.0);
  const double u = u01 * total;
  double cum = 0.0;
  int32_t last_nonzero = 0;
  for (size_t i = 0; i < dist.size(); ++i) {
    if (dist[i] <= 0.f) continue;
    cum += dist[i];
    last_nonzero = static_cast<int32_t>(i);
    if (u < cum) return last_nonzero;
  }
  return last_nonzero;
}

}  // namespace tandem
