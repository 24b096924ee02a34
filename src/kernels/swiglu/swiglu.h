// SwiGLU activation: out = silu(gate) * up, elementwise (fp32 math).
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct SwigluArgs {
  Tensor gate;  // act [n_tokens, inter] (strided rows allowed)
  Tensor up;    // act [n_tokens, inter]
  Tensor out;   // act [n_tokens, inter]
};

void swiglu_ref(const SwigluArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void swiglu_cuda(const SwigluArgs& a, const ExecContext& ctx);
#endif

inline void swiglu(const SwigluArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return swiglu_cuda(a, ctx);
#endif
  swiglu_ref(a, ctx);
}

}  // namespace tandem::kernels
