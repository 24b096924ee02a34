// Sampling parameters and the target distribution they define: temperature, then top-k, then
// top-p (nucleus) over the logits of one row. Temperature 0 means greedy (argmax).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace tandem {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy
  int top_k = 0;            // 0: off
  float top_p = 1.f;        // 1: off
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.f; }
};

// Validates the parameters (temperature >= 0, top_k >= 0, 0 < top_p <= 1); throws Error.
void check_sampling_params(const SamplingParams& p);

// The filtered, renormalised distribution p over the vocabulary for one logits row.
std::vector<float> target_distribution(const float* logits, int64_t vocab, const SamplingParams& p);

// Draws an index from a distribution (u ~ U[0,1) from rng; inverse CDF in index order).
int32_t draw(const std::vector<float>& dist, std::mt19937_64& rng);
double uniform01(std::mt19937_64& rng);

}  // namespace tandem
