// The FP8 wgmma decode linear's quad form (items of 32 tokens), included by
// linear_fp8_wgmma_cuda.cu, whose launch code picks it for calls of up to 32 rows.
#pragma once

#include <cuda.h>
#include <cuda_fp16.h>

#include "kernels/bulk_copy.cuh"
#include "kernels/linear/linear_fp8_wgmma_common.cuh"
#include "kernels/linear/linear_wgmma_common.cuh"
#include "kernels/linear/wgmma_cuda.cuh"
#include "kernels/tensor_map_cuda.cuh"

namespace tandem::kernels::fp8_wgmma {

using namespace wgmma;  // NOLINT: descriptors and the k16 step

// The quads: four classes a pass. ncu at 32 rows (H100) had the 64-k stages' consumers waiting
// for data 32% of the time with DRAM at 54% of peak and 1.30x the codes' bytes read: a stage's box
// is 64 rows x 64 bytes, and a class's units are 512 k apart, so rows are read in 64-byte pieces
// whose 256-byte L2 promotions are gone when the next class comes back. Here a stage is 256 k of
// the item's rows (each line read once) with the tokens of its units, walked by fp8_walk_quads:
// the consumer keeps four class sums and folds each unit into its class's in the class's own
// order, and the class and rank ends come in the loop's order, so the bits are the 64-k stages'
// (linear_fp8_walk.h, and Fp8Linear.WgmmaKernelRowsAreTheDecodeKernelRows, configurations 3 and
// 4). Items of 32 tokens only (four class sums of 16 registers a thread). The codes' box is two
// 128-byte-wide halves in the 128-byte swizzle, so that a warp's code loads (8 rows, 32 bytes
// each) spread over the banks (as stored, rows 256 bytes apart put all 8 in the same banks).
// Measured against the 64-k stages (H100, 2026-12-06, 32 rows): gate|up 92 -> 132 TFLOP/s,
// in_proj 98 -> 138, q|k|v 96 -> 137 (1.28 / 1.38 / 1.38 as stored); the 27B-FP8 step at 32
// streams 23.02 -> 19.86 ms.
//
// Three consumer warpgroups (kGroups 3: 192-row items, one block of 512 threads per SM; the opt-in
// fp8-wgmma-three-groups from 65 rows) put three units' serial chains on an SM where the other
// configurations put two: ncu of the 64 x 64 items at 128 rows (H200) had the tensor pipe active
// 23.7% of the cycles, each consumer waiting for its own unit's products. setmaxnreg as in
// linear_wgmma_cuda.cu: 128 at launch, 40 for the producer, 152 for the consumers (128 x 88 >= 384
// x 24), which the quad consumer fits.
template <int kStages_, int kGroups_>
struct Fp8QuadCfg {
  static constexpr int kN = 32, kStages = kStages_, kGroups = kGroups_;
  static constexpr bool kQuads = true;
  static constexpr int kTileM = 64 * kGroups, kConsumers = 128 * kGroups;
  static constexpr int kThreads = kConsumers + 128, kBlocksPerSm = kGroups == 1 ? 2 : 1;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = kGroups == 1 ? 216 : kGroups == 2 ? 232 : 152;
  static_assert(kGroups >= 1 && kGroups <= 3);
  static_assert((kConsumerRegs * kConsumers + kProducerRegs * 128) * kBlocksPerSm <= 65536,
                "the register file of an SM");
};
constexpr int kQuadK = kFp8WalkQuad * kStageK;  // k per quad stage: 256

template <class C>
struct alignas(1024) Fp8QuadStage {
  __half x[kFp8WalkQuad][C::kN * kStageK];  // unit i's tokens: kN x 128 bytes, 128-byte swizzled
  uint8_t w[C::kTileM * kQuadK];  // two halves of kTileM rows x 128 codes, 128-byte swizzled
};
constexpr int kQuadHalfK = kQuadK / 2;  // a swizzled half's k

// Where lane (g, t) of the warp whose first row is `wrow` (wrow % 8 == g) reads unit c's codes
// (widen_unit's address, row stride and step distance). The 16-byte piece j of row r of a half
// sits at piece j ^ (r % 8); the unit's first step starts at piece j0 = 4 (c % 2) + t / 2 (byte
// 8 (t % 2) of it), its second at j0 + 2 (j0's bit 1 is clear, so j0 + 2 = j0 ^ 2 and the swizzle
// keeps it 32 bytes away, one way or the other); rows g and g + 8 share the swizzle.
struct QuadCodes {
  const uint8_t* at;
  int stride, step_bytes;
};
template <class C>
__device__ __forceinline__ QuadCodes quad_codes(const uint8_t* w, int wrow, int c, int g, int t) {
  const int j0 = 4 * (c & 1) + (t >> 1), phys = j0 ^ g;
  const uint8_t* half = w + (c >> 1) * C::kTileM * kQuadHalfK;
  return {half + wrow * kQuadHalfK + phys * 16 + 8 * (t & 1), kQuadHalfK,
          (phys & 2) ? -kStepK : kStepK};
}

// The codes' two swizzled halves of the stage at k, row tile m (the box is kQuadHalfK wide).
template <class C>
__device__ __forceinline__ void load_quad_codes(uint8_t* w, const CUtensorMap* map, int64_t k,
                                                int64_t m, uint64_t* bar) {
  cuda::tensor_load_2d(w, map, k, m * C::kTileM, bar);
  cuda::tensor_load_2d(w + C::kTileM * kQuadHalfK, map, k + kQuadHalfK, m * C::kTileM, bar);
}

template <class C>
struct Fp8QuadSmem {
  Fp8QuadStage<C> st[C::kStages];  // first: 1024-byte aligned (the swizzle atoms)
  uint64_t full[C::kStages], empty[C::kStages];
};

// The passes [passes_from, passes_to) unit w walks: both, or its class half's.
__device__ __forceinline__ int passes_from(const Fp8Unit& w) { return w.half < 0 ? 0 : w.half; }
__device__ __forceinline__ int passes_to(const Fp8Unit& w) {
  return w.half < 0 ? kFp8WalkPasses : w.half + 1;
}

// kHalves: the instance for calls with class halves (Fp8GemmParams::halves); production's calls
// take the other, whose code has none of it.
template <class C, class Store, bool kHalves = false>
__global__ void __launch_bounds__(C::kThreads, C::kBlocksPerSm)
    linear_fp8_wgmma_quad_kernel(const __grid_constant__ Fp8GemmParams gp) {
  constexpr int kN = C::kN, kStages = C::kStages, kTileM = C::kTileM, kConsumers = C::kConsumers;
  constexpr int kAcc = kN / 2, kQuad = kFp8WalkQuad;
  constexpr int kProducerWarp = kConsumers / 32;
  // A stage's bytes: the codes' box always (zeros past in), the tokens of its valid units.
  constexpr uint32_t kCodeBytes = kTileM * kQuadK, kTokenBytes = kN * kStageK * 2;
  const Params& p = gp.p;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& sm = aligned_ring_smem<Fp8QuadSmem<C>>(smem_raw);
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  init_ring(sm.full, sm.empty, kConsumers / 32);
  const int first = static_cast<int>(blockIdx.x), step = static_cast<int>(gridDim.x);
  const int count = block_units(gp, first, step);
  constexpr auto kNoop = [](int) {};

  if (warp >= kProducerWarp) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::kProducerRegs) : "memory");
    if (warp != kProducerWarp || lane != 0) return;
    // fn(u, k, valid, row tile, token tile) for every stage u of this block's items, in order.
    const auto for_stages = [&](auto&& fn) {
      uint32_t u = 0;
      for (int i = 0; i < count; ++i) {
        const Fp8Unit w = fp8_unit<kHalves>(gp, first + i * step);
        fp8_walk_quads(
            p.in, p.range_k, w.r0, w.r1,
            [&](int64_t k, int valid) { fn(u++, k, valid, w.m, w.nt); }, kNoop, kNoop,
            passes_from(w), passes_to(w));
      }
    };
    // The first stages' codes before the previous kernel has finished, their tokens after it.
    for_stages([&](uint32_t u, int64_t k, int valid, int64_t m, int64_t) {
      if (u >= kStages) return;
      cuda::mbar_arrive_expect_tx(&sm.full[u], kCodeBytes + valid * kTokenBytes);
      load_quad_codes<C>(sm.st[u].w, &gp.w, k, m, &sm.full[u]);
    });
    cuda::pdl_begin();
    for_stages([&](uint32_t u, int64_t k, int valid, int64_t m, int64_t nt) {
      const uint32_t slot = u % kStages;
      if (u >= kStages) {
        cuda::mbar_wait(&sm.empty[slot], ((u / kStages) - 1) & 1);
        cuda::mbar_arrive_expect_tx(&sm.full[slot], kCodeBytes + valid * kTokenBytes);
        load_quad_codes<C>(sm.st[slot].w, &gp.w, k, m, &sm.full[slot]);
      }
      for (int i = 0; i < valid; ++i) {
        cuda::tensor_load_2d(sm.st[slot].x[i], &gp.x, k + i * kStageK, nt * kN, &sm.full[slot]);
      }
    });
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::kConsumerRegs) : "memory");
  cuda::pdl_begin();  // out is read (kAddToOut) and written below
  // As linear_fp8_wgmma_kernel: warpgroup q, warp wi, lane (g, t).
  const int q = warp >> 2, wi = warp & 3, g = lane >> 2, t = lane & 3;
  const int wrow = q * 64 + wi * 16 + g;
  uint32_t u = 0;
  const int ct = static_cast<int>(threadIdx.x);
  for (int i = 0; i < count; ++i) {
    const Fp8Unit w = fp8_unit<kHalves>(gp, first + i * step);
    const int64_t row = w.m * kTileM + wrow;
    const float* scale_a = scale_row(p, row);
    const float* scale_b = scale_row(p, row + 8);
    float d0[kAcc], d1[kAcc], cls[kQuad][kAcc], blk[kAcc], tot[kAcc];
#pragma unroll
    for (int e = 0; e < kAcc; ++e) {
      blk[e] = tot[e] = 0.f;
#pragma unroll
      for (int c = 0; c < kQuad; ++c) cls[c][e] = 0.f;
    }
    // Unit c of a stage folds into cls[c]. The class ends come as 4q, 4q + 1, 4q + 2, 4q + 3
    // after pass q, so class cl's sum is always cls[0] at its end: fold it, then shift the others
    // down (every index a constant: an index from cl put the four sums in local memory). A class
    // half (w.half 0 or 1: pass 0 or 1 of each rank) posts instead of storing: half 0 each rank's
    // range sum after class 3, half 1 each of classes 4-7's sums (fp8_finish_halves_kernel adds
    // them to the first as the whole walk does).
    [[maybe_unused]] int rank = w.r0;  // the rank being walked (class halves' posts)
    fp8_walk_quads(
        p.in, p.range_k, w.r0, w.r1,
        [&](int64_t k, int valid) {
          const uint32_t slot = u % kStages;
          cuda::mbar_wait(&sm.full[slot], (u / kStages) & 1);
#pragma unroll
          for (int c = 0; c < kQuad; ++c) {  // unit c of the stage: class 4 pass + c
            if (c >= valid) continue;
            const int64_t ku = k + c * kStageK;
            UnitIn in;
            in.sa = __ldg(scale_a + ku / kBlockK) * kTokenUnscale;
            in.sb = __ldg(scale_b + ku / kBlockK) * kTokenUnscale;
            const QuadCodes qc = quad_codes<C>(sm.st[slot].w, wrow, c, g, t);
            widen_unit(qc.at, qc.stride, in, qc.step_bytes);
            unit_products<kN>(in, &sm.st[slot].x[c][0], d0, d1);
            fold_unit(d0, d1, in, cls[c]);
          }
          cuda::release_slot(&sm.empty[slot], lane);
          ++u;
        },
        [&](int cl) {  // class cl's sum (always cls[0], above) into the range sum
          if constexpr (kHalves) {
            if (w.half == 1) {  // posted: the sum follows half 0's in fp8_finish_halves_kernel
              float* post = half_post<C>(gp, w.item, rank, 1 + cl - kQuad, ct);
#pragma unroll
              for (int e = 0; e < kAcc; ++e) __stcg(post + e * kConsumers, cls[0][e]);
            }
          }
#pragma unroll
          for (int e = 0; e < kAcc; ++e) {
            blk[e] = cl == 0 ? cls[0][e] : blk[e] + cls[0][e];
#pragma unroll
            for (int c = 0; c + 1 < kQuad; ++c) cls[c][e] = cls[c + 1][e];
            cls[kQuad - 1][e] = 0.f;
          }
        },
        [&](int r) {
          if constexpr (kHalves) {
            if (w.half == 0) {  // the range sum of classes 0-3
              float* post = half_post<C>(gp, w.item, r, 0, ct);
#pragma unroll
              for (int e = 0; e < kAcc; ++e) __stcg(post + e * kConsumers, blk[e]);
            }
            rank = r + 1;
          }
#pragma unroll
          for (int e = 0; e < kAcc; ++e) tot[e] = r == w.r0 ? blk[e] : tot[e] + blk[e];
        },
        passes_from(w), passes_to(w));
    if constexpr (kHalves) {
      if (w.half < 0) store_item<C, Store>(p, w.m, w.nt, q, wi, g, t, tot, gp.sumsq + w.nt * kN);
    } else {
      finish_unit<C, Store>(gp, w, q, wi, g, t, ct, tot);
    }
  }
}

}  // namespace tandem::kernels::fp8_wgmma
