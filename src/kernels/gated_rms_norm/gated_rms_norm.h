// The GDN output norm (NOT zero-centred): per token and value head, over d_v,
//   out = (o * rsqrt(mean(o^2) + eps)) * w * silu(z)        (norm before gate; fp32)
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct GatedRmsNormArgs {
  Tensor o;       // act or f32 [n_tokens, n_heads_v, d_v]
  Tensor z;       // act [n_tokens, n_heads_v, d_v] (strided view allowed)
  Tensor weight;  // bf16|f16|f32 [d_v], shared across heads
  Tensor out;     // act [n_tokens, n_heads_v, d_v]
  float eps = 1e-6f;
};

void gated_rms_norm_ref(const GatedRmsNormArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void gated_rms_norm_cuda(const GatedRmsNormArgs& a, const ExecContext& ctx);
#endif

inline void gated_rms_norm(const GatedRmsNormArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return gated_rms_norm_cuda(a, ctx);
#endif
  gated_rms_norm_ref(a, ctx);
}

}  // namespace tandem::kernels
