// Gated causal attention with GQA over a paged KV cache (one sequence):
//   query row i sits at position kv_len - n_tokens + i and attends to positions [0, that position];
//   out = softmax(q k^T / sqrt(head_dim)) v, then out *= sigmoid(gate) when gate is given.
// q head h reads kv head h / (n_heads_q / n_heads_kv). The same kernel serves prefill, decode and
// verify (1..k+1 rows). On CUDA, calls of up to kAttentionMaxDecodeTokens tokens take the split-KV
// decode kernel (all rows of a kv head in one CTA; no prefill fallback for verify, DESIGN.md
// section 4); longer calls take a flash-style prefill kernel.
// kv_len lives in device memory so that a captured graph can replay with new lengths.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

// The CUDA kernel splits the KV sequence at fixed multiples of this many positions (counted from
// position 0, whatever n_tokens or kv_len is) and merges the splits in order (DESIGN.md inv. 2).
constexpr int64_t kAttentionSplitGranule = 512;
// CUDA calls with more query rows than this use the prefill kernel, whose rows are row-invariant
// among prefill calls but not bit-equal to decode rows. Fixed (like linear's kSkinnyMaxTokens), so
// that verify steps with up to 15 drafts never cross it.
constexpr int64_t kAttentionMaxDecodeTokens = 16;

// f32 elements of CUDA scratch that attention needs for n_tokens query rows when the block table
// covers max_kv_len positions (partial outputs plus max and sum per split, decode/verify only: the
// prefill kernel needs none). The reference needs none.
constexpr int64_t attention_workspace_floats(int64_t n_tokens, int64_t n_heads_q, int64_t head_dim,
                                             int64_t max_kv_len) {
  const int64_t splits = (max_kv_len + kAttentionSplitGranule - 1) / kAttentionSplitGranule;
  const int64_t rows = n_tokens < kAttentionMaxDecodeTokens ? n_tokens : kAttentionMaxDecodeTokens;
  return rows * n_heads_q * splits * (head_dim + 2);
}

struct AttentionArgs {
  Tensor q;            // act [n_tokens, n_heads_q, head_dim] (strided view allowed)
  Tensor gate;         // optional act [n_tokens, n_heads_q, head_dim] (strided view allowed)
  Tensor k_cache;      // act [n_blocks, block_size, n_heads_kv, head_dim]
  Tensor v_cache;      // act [n_blocks, block_size, n_heads_kv, head_dim]
  Tensor block_table;  // i32 [max_blocks]
  Tensor kv_len;       // i32 [1]: cache positions valid after this step's write
  Tensor out;          // act [n_tokens, n_heads_q, head_dim]
  float scale = 0.f;   // 0 means 1/sqrt(head_dim)
  // Optional f32 scratch on cuda, at least attention_workspace_floats(...) elements for the rows of
  // one launch. Give it for graph capture: without it the CUDA path allocates stream-ordered
  // memory (cudaMallocAsync) on every call. Ignored by the reference.
  Tensor workspace;
};

void attention_ref(const AttentionArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void attention_cuda(const AttentionArgs& a, const ExecContext& ctx);
bool attention_cuda_supports(int64_t head_dim);  // shapes the CUDA kernel is built for
#endif

inline void attention(const AttentionArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return attention_cuda(a, ctx);
#endif
  attention_ref(a, ctx);
}

}  // namespace tandem::kernels
