// Acceptance of a verify step (reference section 4) for one sequence.
// Greedy: the longest prefix of drafts equal to the target's argmax, plus the target's token at the
// first mismatch (or the bonus token).
// Sampling, the coupled rule: row j's token is drawn from the target's distribution p_j with the
// request's uniform number for that token's position (sampler.h), exactly as plain sampling draws
// it, and draft d_j is accepted iff the draw equals it. For a deterministic proposal this accepts
// d_j with probability p_j(d_j), the same rate as the standard rejection rule, and the output is
// the target's sample itself: lossless, and bit-identical to plain sampling with the same seed.
// n_acc = accepted drafts + 1 is what the commit stores.
#pragma once

#include <cstdint>
#include <functional>
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

// logits: host f32 [n_drafts + 1, vocab]; row j is the target's distribution after draft j and
// produces the token at position first_position + j.
Verdict accept_sampled(const Tensor& logits, std::span<const int32_t> drafts,
                       const SamplingParams& p, int64_t first_position);

// The general form: choose(j) is the target's token of row j, given drafts 1..j were accepted
// (rows are examined in order and stop at the first mismatch).
Verdict accept_each(std::span<const int32_t> drafts, const std::function<int32_t(int)>& choose);

// Greedy acceptance from the target's argmax of every row (n_drafts + 1 ids), e.g. computed on
// the device so that only the ids cross to the host.
Verdict accept_greedy(std::span<const int32_t> target_argmax, std::span<const int32_t> drafts);

}  // namespace tandem
