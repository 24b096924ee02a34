// Acceptance of a verify step (reference section 4). Greedy: the longest prefix of drafts equal to
// the target's argmax, plus the target's token at the first mismatch (or the bonus token).
// Sampling: the standard rejection rule for a deterministic proposal: accept d_j with probability
// p_j(d_j); on rejection draw from p_j with d_j removed (renormalised); the output distribution is
// the target's. n_acc = accepted drafts + 1 is what the commit stores.
#pragma once

#include <random>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "spec/sampler.h"

namespace tandem {

struct Verdict {
  int n_acc = 1;                       // accepted drafts + 1
  std::vector<int32_t> emitted;        // d_1..d_{n_acc-1}, then the target's own token
  std::vector<int32_t> target_tokens;  // the target's token per examined row (for the trace)
};

// logits: host f32 [n_drafts + 1, vocab]; row j is the target's distribution after draft j.
Verdict accept(const Tensor& logits, std::span<const int32_t> drafts, const SamplingParams& p,
               std::mt19937_64& rng);

// Greedy acceptance from the target's argmax of every row (n_drafts + 1 ids), e.g. computed on
// the device so that only the ids cross to the host; equals accept() with greedy parameters.
Verdict accept_greedy(std::span<const int32_t> target_argmax, std::span<const int32_t> drafts);

}  // namespace tandem
