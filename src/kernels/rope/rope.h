// Partial NeoX rotary embedding, in place, on the first rotary_dim dims of every head:
//   x1 = x[0:r/2], x2 = x[r/2:r];  x1' = x1 cos - x2 sin;  x2' = x2 cos + x1 sin
//   angle = position * theta^(-2i/r), i < r/2.  Dims r..d-1 are untouched.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct RopeArgs {
  Tensor x;          // act [n_tokens, n_heads, head_dim], strided view, modified in place
  Tensor positions;  // i32 [n_tokens]
  int rotary_dim = 0;
  float theta = 10000.f;
};

void rope_ref(const RopeArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void rope_cuda(const RopeArgs& a, const ExecContext& ctx);
#endif

inline void rope(const RopeArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return rope_cuda(a, ctx);
#endif
  rope_ref(a, ctx);
}

}  // namespace tandem::kernels
