// CUDA argmax over f32 logits: one block per row; each thread scans a strided slice, then pairs
// (value, index) are combined so that the larger value wins and ties go to the lower index. The
// result is exact and order-independent; NaN never wins and an all -inf/NaN row gives 0 (as ref).
#include <climits>

#include "kernels/argmax/argmax.h"
#include "kernels/cuda_common.cuh"

namespace tandem::kernels {

namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

__global__ void argmax_kernel(const float* logits, int64_t stride, int64_t vocab, int32_t* out) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  const float* l = logits + blockIdx.x * stride;
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int64_t v = threadIdx.x; v < vocab; v += kThreads) {
    const float x = l[v];
    if (x > bv) {  // strided scan: the first (lowest) index of a value is kept
      bv = x;
      bi = static_cast<int>(v);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
    if (better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      if (better(sv[w], si[w], bv, bi)) {
        bv = sv[w];
        bi = si[w];
      }
    }
    out[blockIdx.x] = bi == INT_MAX ? 0 : bi;
  }
}

}  // namespace

void argmax_cuda(const ArgmaxArgs& a, const ExecContext& ctx) {
  cuda::expect_cuda_dtype(a.logits, DType::kF32, "argmax", "logits");
  cuda::expect_cuda_dtype(a.out, DType::kI32, "argmax", "out");
  cuda::expect_last_contiguous(a.logits, "argmax", "logits");
  const int64_t n = a.logits.dim(0), vocab = a.logits.dim(1);
  TANDEM_CHECK(a.out.numel() >= n && vocab < INT_MAX, "argmax_cuda: out {} for logits {}",
               a.out.describe(), a.logits.describe());
  if (n == 0) return;
  cuda::launch_pdl(argmax_kernel, static_cast<unsigned>(n), kThreads, 0, cuda::stream_of(ctx),
                   a.logits.data<const float>(), a.logits.stride(0), vocab, a.out.data<int32_t>());
  cuda::check_launch("argmax_kernel");
}

}  // namespace tandem::kernels
