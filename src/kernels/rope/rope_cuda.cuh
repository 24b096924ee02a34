// The rotation of one NeoX RoPE pair, shared by rope_cuda.cu and the RMSNorm kernel that applies
// RoPE after the norm, so both compute the same bits. Products and sums are rounded separately
// (no fused multiply-add), as in the reference built with -ffp-contract=off.
#pragma once

#include <cuda_runtime.h>

namespace tandem::kernels::cuda {

// Pair i < half of a head at position pos: (x1, x2) = (x[i], x[i + half]).
__device__ __forceinline__ void rope_rotate(float x1, float x2, float pos, int i, int half,
                                            float theta, float& y1, float& y2) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(2 * half);
  const float angle = pos * (1.f / powf(theta, exponent));
  const float c = cosf(angle), s = sinf(angle);
  y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

}  // namespace tandem::kernels::cuda
