// The inputs of an attention call, prepared in one op: q_norm and k_norm (per-head RMSNorm,
// zero-centred weights) with the partial NeoX RoPE at each row's position, in place on q and kv.k,
// then the paged KV write of the rotated k and of v. Row-wise: the rows may belong to any number
// of sequences (kv.slots says where each row's K/V goes). Exactly rms_norm(q), rms_norm(k),
// kv_cache_write(kv) (attention_inputs_unfused below). On CUDA one launch instead of three when the
// vector norm applies (head_dim a multiple of 8 and 16-byte-loadable views, rope_dim a multiple of
// 8): the decode step of an attention layer has two kernel boundaries fewer.
#pragma once

#include <utility>

#include "core/exec_context.h"
#include "core/tensor.h"
#include "kernels/kv_cache/kv_cache.h"
#include "kernels/rms_norm/rms_norm.h"

namespace tandem::kernels {

struct AttentionInputsArgs {
  Tensor q;       // act [n_tokens, n_heads_q, head_dim] (strided view), normed in place
  Tensor q_norm;  // bf16|f16|f32 [head_dim], zero-centred (1 + w)
  Tensor k_norm;  // bf16|f16|f32 [head_dim], zero-centred; normalises kv.k in place
  float eps = 1e-6f;
  int rope_dim = 0;  // rotary dims (even, <= head_dim) at `positions`; 0: no RoPE
  float rope_theta = 10000.f;
  Tensor positions;     // i32 [n_rows]: each row's position in its sequence
  KvCacheWriteArgs kv;  // k, v, their cache slots and the cache they go to
};

// The three ops one after the other on ctx's device: the reference, and the CUDA path where one
// launch cannot take the shapes.
inline void attention_inputs_unfused(const AttentionInputsArgs& a, const ExecContext& ctx) {
  for (const auto& [t, norm] : {std::pair{a.q, a.q_norm}, std::pair{a.kv.k, a.k_norm}}) {
    rms_norm({.x = t,
              .weight = norm,
              .out = t,
              .eps = a.eps,
              .rope_positions = a.positions,
              .rope_dim = a.rope_dim,
              .rope_theta = a.rope_theta},
             ctx);
  }
  kv_cache_write(a.kv, ctx);
}

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
