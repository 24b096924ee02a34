// Gated causal attention with GQA over a paged KV cache (one sequence):
//   query row i sits at position kv_len - n_tokens + i and attends to positions [0, that position];
//   out = softmax(q k^T / sqrt(head_dim)) v, then out *= sigmoid(gate) when gate is given.
// q head h reads kv head h / (n_heads_q / n_heads_kv). The same kernel serves prefill, decode and
// verify (1..k+1 rows); there is no prefill fallback for n_tokens > 1 (DESIGN.md section 4).
// kv_len lives in device memory so that a captured graph can replay with new lengths.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct AttentionArgs {
  Tensor q;            // act [n_tokens, n_heads_q, head_dim] (strided view allowed)
  Tensor gate;         // optional act [n_tokens, n_heads_q, head_dim] (strided view allowed)
  Tensor k_cache;      // act [n_blocks, block_size, n_heads_kv, head_dim]
  Tensor v_cache;      // act [n_blocks, block_size, n_heads_kv, head_dim]
  Tensor block_table;  // i32 [max_blocks]
  Tensor kv_len;       // i32 [1]: cache positions valid after this step's write
  Tensor out;          // act [n_tokens, n_heads_q, head_dim]
  float scale = 0.f;   // 0 means 1/sqrt(head_dim)
};

void attention_ref(const AttentionArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void attention_cuda(const AttentionArgs& a, const ExecContext& ctx);
#endif

inline void attention(const AttentionArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return attention_cuda(a, ctx);
#endif
  attention_ref(a, ctx);
}

}  // namespace tandem::kernels
