// Pieces both wgmma decode linears share (linear_wgmma_cuda.cu: bf16 weights;
// linear_fp8_wgmma_cuda.cu: FP8 weights): the ring's shared memory and barriers, and an item's
// epilogue, its finished sums in the wgmma accumulator layout (per warp the mma C layout of its 16
// rows) scaled by input_rms and stored through a store policy of linear_decode_common.cuh.
// Internal to src/kernels/linear.
#pragma once

#include "kernels/linear/linear_decode_common.cuh"

namespace tandem::kernels::decode_linear {

// The kernel's shared memory S at its 1024-byte aligned start (the 128-byte swizzle's atoms):
// dynamic shared memory is only 16-byte aligned by contract, so the launch asks for 1024 more.
template <class S>
__device__ __forceinline__ S& aligned_ring_smem(unsigned char* raw) {
  return *reinterpret_cast<S*>(raw + ((1024 - (cuda::smem_u32(raw) & 1023)) & 1023));
}

// Thread 0 initialises a ring's barriers, full (one arrival: the producer's expect_tx, plus the
// bytes) and empty (`releases` arrivals: one per consumer warp that reads a slot), then the block
// synchronises.
template <int kStages>
__device__ __forceinline__ void init_ring(uint64_t (&full)[kStages], uint64_t (&empty)[kStages],
                                          uint32_t releases) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      cuda::mbar_init(&full[i], 1);
      cuda::mbar_init(&empty[i], releases);
    }
    cuda::fence_mbar_init();
  }
  __syncthreads();
}

// Bytes of one element of the store policy's out.
template <class Store>
constexpr int64_t kOutBytes = 2;
template <>
constexpr int64_t kOutBytes<StoreY<float>> = 4;

// The epilogue of an item (row tile m, token tile nt) in its consumer thread (warpgroup q, warp wi,
// lane (g, t)): tot, its sums (the mma C layout), scaled by input_rms (sumsq: the item's tokens'
// sums of squares) and stored through Store.
template <class C, class Store>
__device__ __forceinline__ void store_item(const Params& p, int64_t m, int64_t nt, int q, int wi,
                                           int g, int t, const float (&tot)[C::kN / 2],
                                           const float* sumsq) {
  constexpr int kNT = C::kN / 8;
  const int64_t tile16 = m * (C::kTileM / kRows) + q * 4 + wi;
  if (tile16 * kRows >= p.out_f) return;
  Params ps = p;
  ps.n_tokens = static_cast<int>(p.n_tokens - nt * C::kN);
  ps.out = static_cast<char*>(p.out) + nt * C::kN * p.out_stride * kOutBytes<Store>;
  float c[kNT][4], prev[kNT][4] = {};
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) c[j][e] = tot[4 * j + e];
  }
  if constexpr (Store::kReadsOut) Store::template load_prev<kNT>(ps, tile16, g, t, prev);
  if (p.input_rms) {
    float scale[kNT][2];
    inverse_rms<kNT>(ps, sumsq, t, scale);
    scale_sums<kNT>(c, scale);
  }
  Store::template store<kNT>(ps, tile16, g, t, c, prev);
}

}  // namespace tandem::kernels::decode_linear
