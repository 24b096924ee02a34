// Sampling parameters, the target distribution they define (temperature, then min-p and top-k,
// then top-p over the logits of one row, as vLLM orders them; temperature 0 means greedy), and the
// randomness of a sampled sequence: one uniform number per (seed, position), from a counter-based
// hash. A token's draw depends only on its request's seed, its position and its distribution, never
// on how many draws came before it, on its batch-mates or on how many drafts a step verified: so a
// seeded request is reproducible under any load, and with the coupled acceptance rule
// (acceptance.h) speculative sampling emits exactly what plain sampling emits.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace tandem {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy
  int top_k = 0;            // 0: off
  float top_p = 1.f;        // 1: off
  float min_p = 0.f;        // 0: off; else keep tokens with p >= min_p * p_max (vLLM's min_p)
  uint64_t seed = 0;
  // Penalties on the logits before the distribution, as vLLM applies them: presence and frequency
  // count the generated tokens (subtract presence once, frequency per occurrence); repetition
  // divides positive logits (multiplies negative ones) of every token in prompt or output.
  float presence_penalty = 0.f;    // [-2, 2]; 0: off
  float frequency_penalty = 0.f;   // [-2, 2]; 0: off
  float repetition_penalty = 1.f;  // (0, 2]; 1: off
  // OpenAI's logit_bias: (token, bias in [-100, 100]) added to the token's logit before the
  // penalties, as vLLM orders them.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // vLLM's min_tokens: the request's stop ids (EOS, stop_token_ids) get a -inf logit until this
  // many tokens are generated, so generation cannot stop earlier. 0: off.
  int min_tokens = 0;
  bool greedy() const { return temperature <= 0.f; }
  // Whether the host adjusts a row before choosing from it (penalties, logit bias, min_tokens).
  bool adjusts_logits() const {
    return presence_penalty != 0.f || frequency_penalty != 0.f || repetition_penalty != 1.f ||
           !logit_bias.empty() || min_tokens > 0;
  }
};

// Validates the parameters (temperature >= 0, top_k >= 0, 0 < top_p <= 1, 0 <= min_p <= 1,
// min_tokens >= 0);
// throws Error.
void check_sampling_params(const SamplingParams& p);

// The filtered, renormalised distribution p over the vocabulary for one logits row.
std::vector<float> target_distribution(const float* logits, int64_t vocab, const SamplingParams& p);

// u in [0, 1) for the token at `position` of a request seeded with `seed` (splitmix64 of both).
double uniform_at(uint64_t seed, int64_t position);

// The inverse CDF of dist (in index order) at u in [0, 1).
int32_t draw(const std::vector<float>& dist, double u);

}  // namespace tandem
