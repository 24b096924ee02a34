// The FP8 wgmma decode linear's shared pieces (linear_fp8_wgmma_cuda.cu's 64-token items and the
// quad form's 32-token items in linear_fp8_wgmma_quad_cuda.cuh): the stage's k, the kernel
// parameters, a block's unit of work, one unit's A operand, products and fold.
#pragma once

#include <cuda.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/linear/linear_decode_common.cuh"
#include "kernels/linear/linear_fp8_common.cuh"
#include "kernels/linear/linear_fp8_walk.h"
#include "kernels/linear/linear_wgmma_common.cuh"
#include "kernels/linear/wgmma_cuda.cuh"

namespace tandem::kernels::fp8_wgmma {

using namespace decode_linear;  // NOLINT: the shared pieces of the decode kernels
using namespace fp8_linear;     // NOLINT: the FP8 kernels' arithmetic

constexpr int kStageK = kUnitK;  // k per ring stage: one unit
static_assert(kStepsPerUnit == 2 && kStepK == 32, "a unit is two 32-k steps of two k16 products");
constexpr int kPadK = 64;  // the f16 token rows' length is in rounded up to this

struct Fp8GemmParams {
  Params p;  // the shape, the plan (splits, range_k), the scales, input_rms
  CUtensorMap w, x;
  const float* sumsq;  // input_rms: each token's sum of squares (fp8_tokens_kernel)
  // Split mode (when the items do not fill one wave of blocks and the plan has several ranks): a
  // unit is one rank of an item, which posts its range sum to ws ([item][rank][accumulator]
  // [consumer thread]); fp8_finish_split_kernel adds the ranks and stores. Else ws is null and a
  // unit is a whole item.
  // Class halves (the quad form only; the opt-in fp8-quad-halves): units from halves_from on are
  // two per item, items halves_from, halves_from + 1, ...: half 0 walks pass 0 (classes 0-3) of
  // every rank and posts each rank's range sum so far, half 1 walks pass 1 and posts its four
  // class sums (kHalfPosts vectors a rank, [half item][rank][post][accumulator][consumer thread]
  // in ws); fp8_finish_halves_kernel adds them in the walk's order and stores. Units before
  // halves_from are whole items.
  float* ws;
  int n_tiles, items, units;
  bool halves;
  int halves_from;
};
constexpr int kHalfPosts = 1 + kFp8WalkQuad;  // half 0's range sum, half 1's four class sums

// Unit u: its item (row tile m, token tile nt), its ranks [r0, r1) and, for a class half, which
// (-1: the whole item).
struct Fp8Unit {
  int item, r0, r1, half;
  int64_t m, nt;
};
// kHalves: the quad kernel's instance for calls with class halves (no split mode there); the
// others never see a half.
template <bool kHalves = false>
__device__ __forceinline__ Fp8Unit fp8_unit(const Fp8GemmParams& gp, int u) {
  Fp8Unit w;
  if constexpr (kHalves) {
    const bool half = u >= gp.halves_from;
    w.item = half ? gp.halves_from + (u - gp.halves_from) / 2 : u;
    w.r0 = 0;
    w.r1 = gp.p.splits;
    w.half = half ? (u - gp.halves_from) % 2 : -1;
  } else {
    const bool split = gp.ws != nullptr;
    w.item = split ? u / gp.p.splits : u;
    w.r0 = split ? u % gp.p.splits : 0;
    w.r1 = split ? w.r0 + 1 : gp.p.splits;
    w.half = -1;
  }
  w.m = w.item / gp.n_tiles;
  w.nt = w.item % gp.n_tiles;
  return w;
}

// Where consumer thread ct's accumulator 0 of post `post` of rank r of half item w goes (the
// next accumulators kConsumers floats apart).
template <class C>
__device__ __forceinline__ float* half_post(const Fp8GemmParams& gp, int item, int r, int post,
                                            int ct) {
  const int64_t j = item - gp.halves_from;
  return gp.ws + ((j * gp.p.splits + r) * kHalfPosts + post) * (C::kN / 2) * C::kConsumers + ct;
}

static_assert(kFp8WalkClasses == kConsumerWarps && kFp8WalkUnitK == kUnitK &&
                  kFp8WalkGroupK == kGroupK,
              "linear_fp8_walk.h walks the FP8 order's units");

// One unit's A operand (the codes of the warp's rows widened, in fragment order) and its scales.
struct UnitIn {
  uint32_t a[4][4];
  float sa, sb;
};

// How many units block `first` of a grid of `step` takes (units first, first + step, ...).
__device__ __forceinline__ int block_units(const Fp8GemmParams& gp, int first, int step) {
  return first < gp.units ? (gp.units - first + step - 1) / step : 0;
}

// The scale row of weight row `row` (rows past out_f clamped, as the other FP8 kernels do; their
// codes arrive as zeros and they are not stored).
__device__ __forceinline__ const float* scale_row(const Params& p, int64_t row) {
  return p.w_scale + (min(row, p.out_f - 1) >> p.scale_shift) * p.scale_cols;
}

// The end of unit w in consumer thread ct (warpgroup q, warp wi, lane (g, t)): in split mode its
// rank's sum posted to the scratch for fp8_finish_split_kernel, else the item stored (the quad
// kernel's class-halves instance stores whole items itself).
template <class C, class Store>
__device__ __forceinline__ void finish_unit(const Fp8GemmParams& gp, const Fp8Unit& w, int q,
                                            int wi, int g, int t, int ct,
                                            const float (&tot)[C::kN / 2]) {
  constexpr int kAcc = C::kN / 2;
  if (gp.ws != nullptr) {
    float* mine =
        gp.ws + (static_cast<int64_t>(w.item) * gp.p.splits + w.r0) * kAcc * C::kConsumers;
#pragma unroll
    for (int e = 0; e < kAcc; ++e) __stcg(mine + e * C::kConsumers + ct, tot[e]);
  } else {
    store_item<C, Store>(gp.p, w.m, w.nt, q, wi, g, t, tot, gp.sumsq + w.nt * C::kN);
  }
}

// Lane (g, t)'s A operand of one unit, from codes rows `stride` bytes apart (wa: row g's bytes of
// the unit from 8t; step_bytes: from there to the second 32-k step's, which a swizzled layout
// moves): bytes 8t..8t+7 of each 32-k step of rows g and g + 8, as linear_fp8_batch_cuda.cu loads
// them; a[2s] is step s's first product (k 8t..8t+3), a[2s + 1] its second (8t+4..8t+7), in the
// A-fragment order (row g, row g + 8, then the upper k pair of each).
__device__ __forceinline__ void widen_unit(const uint8_t* wa, int stride, UnitIn& in,
                                           int step_bytes = kStepK) {
#pragma unroll
  for (int s = 0; s < kStepsPerUnit; ++s) {
    const uint2 qa = *reinterpret_cast<const uint2*>(wa + s * step_bytes);
    const uint2 qb = *reinterpret_cast<const uint2*>(wa + 8 * stride + s * step_bytes);
    in.a[2 * s][0] = widen2(qa.x), in.a[2 * s][1] = widen2(qb.x);
    in.a[2 * s][2] = widen2(qa.x >> 16), in.a[2 * s][3] = widen2(qb.x >> 16);
    in.a[2 * s + 1][0] = widen2(qa.y), in.a[2 * s + 1][1] = widen2(qb.y);
    in.a[2 * s + 1][2] = widen2(qa.y >> 16), in.a[2 * s + 1][3] = widen2(qb.y >> 16);
  }
}

// One unit's products: d0 and d1 (kN / 2 accumulators each) zeroed, then the unit's two 32-k
// steps as four wgmma k16 with A from in.a and B the unit's tokens (kN rows of 64 k in the 128-byte
// swizzle at `tokens`), waited for.
template <int kN>
__device__ __forceinline__ void unit_products(const UnitIn& in, const __half* tokens,
                                              float (&d0)[kN / 2], float (&d1)[kN / 2]) {
  using namespace wgmma;  // NOLINT: the k16 step and its fences
#pragma unroll
  for (int e = 0; e < kN / 2; ++e) d0[e] = d1[e] = 0.f;
  pin_registers(d0), pin_registers(d1);  // zeroed before the fence
  const uint64_t bd = sw128_desc(tokens);
  wg_fence();  // a, d0, d1 were written by this thread
  wgmma_f16_rs_k16<kN>(d0, in.a[0], bd);
  wgmma_f16_rs_k16<kN>(d0, in.a[1], bd + 2);
  wgmma_f16_rs_k16<kN>(d1, in.a[2], bd + 4);
  wgmma_f16_rs_k16<kN>(d1, in.a[3], bd + 6);
  wg_commit();
  wg_wait<0>();
  pin_registers(d0), pin_registers(d1);  // read after the wait
}

// The unit's fold into its class sum: c = fmaf(d0 + d1, scale, c), rows g (sa) and g + 8 (sb).
template <int kAcc>
__device__ __forceinline__ void fold_unit(const float (&d0)[kAcc], const float (&d1)[kAcc],
                                          const UnitIn& in, float (&cls)[kAcc]) {
#pragma unroll
  for (int e = 0; e < kAcc; ++e) cls[e] = fmaf(d0[e] + d1[e], (e & 2) ? in.sb : in.sa, cls[e]);
}

}  // namespace tandem::kernels::fp8_wgmma
