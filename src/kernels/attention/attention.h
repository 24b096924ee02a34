// Gated causal attention with GQA over a paged KV cache, for a batch of sequences:
//   row t of sequence s (T_s rows) sits at position kv_len[s] - T_s + t and attends to that
//   sequence's positions [0, that position], read through its block table row;
//   out = softmax(q k^T / sqrt(head_dim)) v, then out *= sigmoid(gate) when gate is given.
// q head h reads kv head h / (n_heads_q / n_heads_kv). One op serves prefill chunks, decode and
// verify (1..k+1 rows per sequence). On CUDA, `prefill` picks the kernel family: false takes the
// split-KV decode kernel (all rows of a sequence's kv head in one CTA; at most
// kAttentionMaxDecodeTokens rows per sequence; no prefill fallback for verify, DESIGN.md section
// 4), true the flash-style prefill kernel. Each family's rows are invariant to the batch (DESIGN.md
// invariant 2); the two are not bit-equal to each other, so a row's family must be a function of
// the request (prompt rows: prefill; generated rows: decode), never of the step's size.
// kv_len and the block tables live in device memory so that a captured graph can replay with new
// lengths.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"
#include "kernels/seq_layout.h"

namespace tandem::kernels {

// The CUDA kernel splits the KV sequence at fixed multiples of this many positions (counted from
// position 0, whatever the rows or kv_len are) and merges the splits in order (DESIGN.md inv. 2).
constexpr int64_t kAttentionSplitGranule = 512;
// The most rows one sequence may have in a decode-family call (verify with up to 15 drafts).
constexpr int64_t kAttentionMaxDecodeTokens = 16;

// f32 elements of CUDA scratch that a decode-family call of n_rows rows needs when no sequence
// has more than max_kv_len positions (partial outputs plus max and sum per split). The prefill
// family and the reference need none.
constexpr int64_t attention_workspace_floats(int64_t n_rows, int64_t n_heads_q, int64_t head_dim,
                                             int64_t max_kv_len) {
  const int64_t splits = (max_kv_len + kAttentionSplitGranule - 1) / kAttentionSplitGranule;
  return n_rows * n_heads_q * splits * (head_dim + 2);
}

struct AttentionArgs {
  Tensor q;             // act [n_rows, n_heads_q, head_dim] (strided view allowed)
  Tensor gate;          // optional act [n_rows, n_heads_q, head_dim] (strided view allowed)
  Tensor k_cache;       // act [n_blocks, block_size, n_heads_kv, head_dim]
  Tensor v_cache;       // act [n_blocks, block_size, n_heads_kv, head_dim]
  Tensor block_tables;  // i32 [n_seqs, max_blocks_per_seq]: row s is sequence s's pages
  Tensor kv_len;        // i32 [n_seqs]: positions valid after this step's KV write
  Tensor out;           // act [n_rows, n_heads_q, head_dim]
  SeqLayout seqs;
  bool prefill = false;  // the kernel family (CUDA); the reference ignores it
  float scale = 0.f;     // 0 means 1/sqrt(head_dim)
  // Decode family on cuda: f32 scratch of at least attention_workspace_floats(n_rows, n_heads_q,
  // head_dim, max kv_len the block tables cover) elements. Required (no allocation in a step).
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
