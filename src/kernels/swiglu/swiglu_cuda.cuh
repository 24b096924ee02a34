// The SwiGLU of one bf16 gate and up on the device, shared by swiglu_cuda.cu and the decode
// linear's fused epilogue (linear_persistent_cuda.cu), so that both round the same formula the
// same way: the fused MLP is bit-identical to linear-then-swiglu.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda_common.cuh"

namespace tandem::kernels::cuda {

__device__ __forceinline__ __nv_bfloat16 swiglu_bf16(__nv_bfloat16 gate, __nv_bfloat16 up) {
  return __float2bfloat16_rn(silu(__bfloat162float(gate)) * __bfloat162float(up));
}

}  // namespace tandem::kernels::cuda
