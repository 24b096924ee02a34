// The arithmetic every FP8 decode-linear kernel shares (linear_fp8_cuda.cu: 1..8 rows per launch;
// linear_fp8_batch_cuda.cu: super-tiles of several 16-row tiles sharing one copy of the tokens):
// the k units a consumer warp owns, the exact widening of e4m3 codes to f16, the tokens' fold and
// 2^-8 scaling into f16, and the f16 mma. A row's bits follow from these and the plan
// (linear_fp8_plan), so both kernels give the same bits. Internal to src/kernels/linear.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/linear/linear_decode_common.cuh"

namespace tandem::kernels::fp8_linear {

using decode_linear::kConsumerWarps;

constexpr int kBlockK = 128;  // k per scale block (kFp8BlockCols)
constexpr int kStepK = 32;    // k per warp step (8 per lane)
constexpr int kUnitK = 64;    // k per warp unit: 2 steps, half a scale block
constexpr int kStepsPerUnit = kUnitK / kStepK;
// k per group: one unit of each consumer warp. Chunks start at multiples of it (from the range's
// start), so that unit u of a range is always warp u % 8's, whatever the chunking.
constexpr int kGroupK = kUnitK * kConsumerWarps;
// The plan's chunk (plan_linear's cost unit): one plan per shape for every configuration.
constexpr int kPlanChunkK = 2048;

// Start (in a chunk that begins at a multiple of kGroupK) of the u-th unit of warp w.
__device__ __forceinline__ int unit_k(int u, int w) { return (u * kConsumerWarps + w) * kUnitK; }

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

__device__ __forceinline__ uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Codes k, k + 1 (the low and high byte of v) as f16 (k in the low half), exactly: every e4m3
// value is an f16 value.
__device__ __forceinline__ uint32_t widen2(uint32_t v) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// bf16 pair as f16 pair (exact inside f16's normal range; the tokens are scaled by 2^-8 first).
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t v) {
  const __half2 h = __floats2half2_rn(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  return *reinterpret_cast<const uint32_t*>(&h);
}

// D += A B for one m16n8k16 tile, f16 in, fp32 accumulate.
__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The tokens enter the f16 product times 2^-8 (exact, in bf16), which keeps them inside f16's
// range up to |x| < 2^24; the block scales carry the 2^8 back (exact).
constexpr uint32_t kTokenScale = 0x3B803B80u;  // bf16x2 (2^-8, 2^-8)
constexpr float kTokenUnscale = 256.f;

// 8 bf16 tokens (one lane's k of a step) as the f16 pairs the product takes: x (1 + g) rounded
// once to bf16 (kFold; f: the 8 g), times 2^-8, in f16. Both token paths (staged, in the slots)
// call this, so they give the same bits.
template <bool kFold>
__device__ __forceinline__ uint4 tokens_f16(uint4 xv, const uint4& f) {
  if constexpr (kFold) {
    xv.x = bf16x2_fma(xv.x, f.x, xv.x), xv.y = bf16x2_fma(xv.y, f.y, xv.y);
    xv.z = bf16x2_fma(xv.z, f.z, xv.z), xv.w = bf16x2_fma(xv.w, f.w, xv.w);
  }
  return make_uint4(bf16x2_to_f16x2(bf16x2_mul(xv.x, kTokenScale)),
                    bf16x2_to_f16x2(bf16x2_mul(xv.y, kTokenScale)),
                    bf16x2_to_f16x2(bf16x2_mul(xv.z, kTokenScale)),
                    bf16x2_to_f16x2(bf16x2_mul(xv.w, kTokenScale)));
}

}  // namespace tandem::kernels::fp8_linear
