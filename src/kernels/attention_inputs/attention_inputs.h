// The inputs of an attention call, prepared in one op: q_norm and k_norm (per-head RMSNorm,
// zero-centred weights) with the partial NeoX RoPE, in place on q and k, then the paged KV write
// of the rotated k and of v. Exactly rms_norm(q), rms_norm(k), kv_cache_write(k, v) (rms_norm.h,
// kv_cache.h). On CUDA one launch instead of three when the vector norm applies (head_dim a
// multiple of 8 and 16-byte-loadable views, rope_dim a multiple of 8): the decode step of an
// attention layer has two kernel boundaries fewer.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct AttentionInputsArgs {
  Tensor q;       // act [n_tokens, n_heads_q, head_dim] (strided view), normed in place
  Tensor k;       // act [n_tokens, n_heads_kv, head_dim] (strided view), normed in place
  Tensor v;       // act [n_tokens, n_heads_kv, head_dim] (strided view)
  Tensor q_norm;  // bf16|f16|f32 [head_dim], zero-centred (1 + w)
  Tensor k_norm;  // bf16|f16|f32 [head_dim], zero-centred
  float eps = 1e-6f;
  Tensor positions;  // i32 [n_tokens]: the RoPE angle and the cache slot
  int rope_dim = 0;  // rotary dims (even, <= head_dim); 0: no RoPE
  float rope_theta = 10000.f;
  Tensor block_table;  // i32 [max_blocks] for this sequence
  Tensor k_cache;      // act [n_blocks, block_size, n_heads_kv, head_dim]
  Tensor v_cache;      // act [n_blocks, block_size, n_heads_kv, head_dim]
};

void attention_inputs_ref(const AttentionInputsArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void attention_inputs_cuda(const AttentionInputsArgs& a, const ExecContext& ctx);
#endif

inline void attention_inputs(const AttentionInputsArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return attention_inputs_cuda(a, ctx);
#endif
  attention_inputs_ref(a, ctx);
}

}  // namespace tandem::kernels
