// The epilogue of the wgmma decode linears (linear_wgmma_cuda.cu: bf16 weights;
// linear_fp8_wgmma_cuda.cu: FP8 weights): an item's finished sums in the wgmma accumulator layout
// (per warp the mma C layout of its 16 rows), scaled by input_rms and stored through a store policy
// of linear_decode_common.cuh. Internal to src/kernels/linear.
#pragma once

#include "kernels/linear/linear_decode_common.cuh"

namespace tandem::kernels::decode_linear {

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
