// The vector RMSNorm row of rms_norm_cuda.cu, shared with the kernels that norm rows as part of a
// larger launch (attention_inputs_cuda.cu), so that both compute the same bits: a row is 8-element
// chunks, up to kVecChunks per thread, every 16-byte load issued before any use, a per-thread sum
// in chunk order, block_sum's fixed tree, then optionally the partial NeoX RoPE through shared
// memory with rope_cuda.cuh's rotation. The block size must be vec_norm_threads(dim).
#pragma once

#include "kernels/cuda_common.cuh"
#include "kernels/rope/rope_cuda.cuh"

namespace tandem::kernels::cuda {

constexpr int kVecChunks = 4;     // 8-element chunks per thread: dims up to 32 * 1024 = 32768
constexpr int kRopeMaxDim = 512;  // rotary dims the vector row rotates itself

struct RowView {  // [rows, heads, dim] bf16 with the last dim contiguous
  __nv_bfloat16* base;
  int64_t row_stride, head_stride;
  __device__ __nv_bfloat16* at(int64_t r, int64_t h) const {
    return base + r * row_stride + h * head_stride;
  }
};

struct RopeParams {  // RoPE after the norm (rms_norm.h); half == 0: none
  const int32_t* positions;
  int half;
  float theta;
};

// A function of dim only (row invariance): enough warps for kVecChunks chunks per thread.
inline int vec_norm_threads(int64_t dim) {
  const int64_t per_pass = 8 * kVecChunks;
  return static_cast<int>(32 * ceil_div((dim + per_pass - 1) / per_pass, 32));
}

struct VecNormWeights {
  float v[kVecChunks][8];
};

// The weights of this thread's chunks (zero-centred: 1 + w). Loaded before the PDL wait by the
// callers: a step never writes weights.
__device__ __forceinline__ VecNormWeights vec_norm_weights(AnyFloatPtr w, int64_t dim,
                                                           bool zero_centred) {
  VecNormWeights wv;
#pragma unroll
  for (int c = 0; c < kVecChunks; ++c) {
    const int64_t i = (static_cast<int64_t>(c) * blockDim.x + threadIdx.x) * 8;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      wv.v[c][j] = i < dim ? (zero_centred ? 1.f + w[i + j] : w[i + j]) : 0.f;
    }
  }
  return wv;
}

// out = norm(src) (src = residual += xs when fused, else xs), then RoPE of rope.half pairs at
// position pos (read by the caller, so that its load can overlap the row's). Every thread of the
// block must call it.
__device__ __forceinline__ void vec_norm_row(const __nv_bfloat16* xs, __nv_bfloat16* src,
                                             __nv_bfloat16* o, bool fused, const VecNormWeights& wv,
                                             int64_t dim, float eps, RopeParams rope, float pos) {
  __shared__ float scratch[32];
  uint4 a[kVecChunks], b[kVecChunks];
#pragma unroll
  for (int c = 0; c < kVecChunks; ++c) {  // every load first
    const int64_t i = (static_cast<int64_t>(c) * blockDim.x + threadIdx.x) * 8;
    if (i < dim) {
      a[c] = *reinterpret_cast<const uint4*>(src + i);
      if (fused) b[c] = *reinterpret_cast<const uint4*>(xs + i);
    }
  }
  float v[kVecChunks][8];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < kVecChunks; ++c) {
    const int64_t i = (static_cast<int64_t>(c) * blockDim.x + threadIdx.x) * 8;
    if (i >= dim) break;
    const __nv_bfloat16* pa = reinterpret_cast<const __nv_bfloat16*>(&a[c]);
    const __nv_bfloat16* pb = reinterpret_cast<const __nv_bfloat16*>(&b[c]);
    __nv_bfloat16 sum[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      sum[j] =
          fused ? __float2bfloat16_rn(__bfloat162float(pa[j]) + __bfloat162float(pb[j])) : pa[j];
      v[c][j] = __bfloat162float(sum[j]);
      ss += v[c][j] * v[c][j];
    }
    if (fused) *reinterpret_cast<uint4*>(src + i) = *reinterpret_cast<const uint4*>(sum);
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(dim) + eps);
  // With RoPE the first `rot` normed values go through shared memory: a pair's two elements
  // belong to different threads. rot is a multiple of 8, so a chunk is all in or all out.
  __shared__ __align__(16) __nv_bfloat16 rot_row[kRopeMaxDim];
  const int64_t rot = 2 * static_cast<int64_t>(rope.half);
#pragma unroll
  for (int c = 0; c < kVecChunks; ++c) {
    const int64_t i = (static_cast<int64_t>(c) * blockDim.x + threadIdx.x) * 8;
    if (i >= dim) break;
    __nv_bfloat16 y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = __float2bfloat16_rn((v[c][j] * inv) * wv.v[c][j]);
    uint4* dst = reinterpret_cast<uint4*>(i < rot ? rot_row + i : o + i);
    *dst = *reinterpret_cast<const uint4*>(y);
  }
  if (rot == 0) return;
  __syncthreads();
  for (int i = threadIdx.x; i < rope.half; i += blockDim.x) {
    float y1, y2;
    rope_rotate(__bfloat162float(rot_row[i]), __bfloat162float(rot_row[i + rope.half]), pos, i,
                rope.half, rope.theta, y1, y2);
    o[i] = __float2bfloat16_rn(y1);
    o[i + rope.half] = __float2bfloat16_rn(y2);
  }
}

}  // namespace tandem::kernels::cuda
