// Internal interface between the two CUDA linear paths (skinny weight streaming, tensor-core GEMM).
// Not part of the op interface: model code includes linear.h only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

// n_tokens <= kSkinnyMaxTokens runs the weight-streaming kernel (decode/verify shapes).
constexpr int64_t kSkinnyMaxTokens = 16;

struct LinearShape {
  const void* x = nullptr;  // bf16 [n, in], row stride x_stride
  const void* w = nullptr;  // bf16 [out_f, in], contiguous
  void* out = nullptr;      // bf16|f32 [n, out_f], row stride out_stride
  int64_t n = 0, in = 0, out_f = 0, x_stride = 0, out_stride = 0;
  bool vec_ok = false;  // 16-byte loads are legal (in, x_stride multiples of 8; aligned bases)
};

// Tensor-core decode/verify path (n <= kSkinnyMaxTokens, vec_ok): linear_mma_cuda.cu.
void linear_skinny_mma_bf16(const LinearShape& s, cudaStream_t stream);
void linear_skinny_mma_f32(const LinearShape& s, cudaStream_t stream);
// Bulk-copy (TMA engine) streaming variant of the same path: linear_stream_cuda.cu. `max_splits`
// caps the k-split across a thread-block cluster (1, 2, 4 or 8).
void linear_skinny_stream(const LinearShape& s, bool f32_out, int max_splits, cudaStream_t stream);
void linear_gemm_bf16(const LinearShape& s, cudaStream_t stream);
void linear_gemm_f32(const LinearShape& s, cudaStream_t stream);

}  // namespace tandem::kernels
