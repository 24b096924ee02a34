// Log-probabilities of the model's raw distribution over one logits row (before penalties,
// temperature and top-k/p, as vLLM reports them by default): the chosen token's and the n most
// likely tokens' (ties by the smaller id), from a log-sum-exp in double precision.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0.f;
  int32_t rank = 0;  // 1 + the tokens with a strictly higher logit (vLLM's `rank`)
};

// One generated token's log-probability and the most likely alternatives at its position.
struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first
};

inline constexpr int kMaxTopLogprobs = 20;

// row: f32 [vocab]; top_n in 0..kMaxTopLogprobs.
TokenLogprobs token_logprobs(const float* row, int64_t vocab, int32_t chosen, int top_n);

}  // namespace tandem
