// RMSNorm over the last dim, optionally fused with the residual add of a pre-norm block:
//   if residual is given:  residual += x;  out = norm(residual)    (x is the mixer/MLP output)
//   otherwise:             out = norm(x)
//   norm(r) = r * rsqrt(mean(r^2) + eps) * (zero_centred ? 1 + w : w), in fp32.
// x, residual and out are [rows, dim] or [rows, heads, dim] views (last dim contiguous); this also
// serves the per-head q_norm/k_norm over strided q/k views. With rope_dim > 0 (3-D views only) the
// partial NeoX RoPE of rope.h is then applied to out in the same call, with the same result as
// calling rope() on out afterwards: on CUDA one launch instead of two.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct RmsNormArgs {
  Tensor x;         // act [n_tokens, (n_heads,) dim]
  Tensor weight;    // bf16|f16|f32 [dim]
  Tensor out;       // act, same shape as x (may alias x when residual is empty)
  Tensor residual;  // optional act [n_tokens, dim], updated in place
  float eps = 1e-6f;
  bool zero_centred = true;
  Tensor rope_positions;  // i32 [rows], used when rope_dim > 0
  int rope_dim = 0;       // rotary dims (even, <= dim); 0: no RoPE
  float rope_theta = 10000.f;
};

void rms_norm_ref(const RmsNormArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void rms_norm_cuda(const RmsNormArgs& a, const ExecContext& ctx);
#endif

inline void rms_norm(const RmsNormArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return rms_norm_cuda(a, ctx);
#endif
  rms_norm_ref(a, ctx);
}

}  // namespace tandem::kernels
