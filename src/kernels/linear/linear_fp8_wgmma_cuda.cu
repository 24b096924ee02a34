// FP8 decode/verify linear on wgmma: the bits of the FP8 decode kernels (linear_fp8_cuda.cu,
// linear_fp8_batch_cuda.cu) for calls of many rows, which those read the weights for once per 32
// rows (at 256 streams the FP8 step took 2.5x the bf16 one, whose rows go to linear_wgmma_cuda.cu).
//
// The FP8 order (linear_fp8_common.cuh; the plan linear_fp8_plan): rank r's range is cut into 64-k
// units from its start, unit u belonging to class u % 8 (the FP8 kernels' warp u % 8); a unit is
// two 32-k steps, each one chain of two m16n8k16 f16 products from +0 whose k sets are the lane
// pattern {8t..8t+3} then {8t+4..8t+7} (t = 0..3), the codes widened exactly to f16 and the tokens
// x' = f16(bf16(x (1 + g)) 2^-8) (tokens_f16); the class sum takes c = fmaf(d0 + d1, scale 2^8, c)
// per unit in increasing k; the range sum adds the 8 class sums left to right, the output the
// ranks' sums left to right, then input_rms's scale and the store policy. A block walks an item
// (64 or 128 weight rows x kN tokens) in that order, class 0's units, then class 1's, ..., with
// the accumulator sets d0, d1 (one unit's steps), the class sum, the range sum and the total.
//
// The product is wgmma m64nNk16 f16 with A in registers: each warp widens its 16 rows' codes from
// the stage (the FP8 kernels' fragments, byte for byte) and B, the tokens, comes from shared
// memory in the 128-byte swizzle. The lane pattern is not a natural k16 set, so the tokens are
// stored permuted: fp8_tokens_kernel, launched before the GEMM, writes each token's x' once per
// call into the scratch with every 32-k step reordered as (k 0-3, 8-11, 16-19, 24-27, 4-7, 12-15,
// 20-23, 28-31) pairwise, so that position p of each k16 step holds the k the m16n8k16 product
// has at p (and, with input_rms, the token's sum of squares in sum_squares' order). That wgmma's
// sums equal mma.sync's for the same values at the same positions is the probe result of
// bench/probes/mma_bits_probe.cu (bf16, both operands in shared memory); for f16 with A in
// registers it is what the tests check (CudaConformanceFp8.WgmmaKernelRowsAreTheDecodeKernelRows).
//
// Roles, ring and item order as linear_wgmma_cuda.cu: one or two consumer warpgroups, a producer
// warpgroup that gives up its registers and whose first warp fills a ring of 64-k stages (the
// item's codes as stored, 64 bytes a row, and its tokens' f16 rows, one tensor-map box each; the
// first stages' codes before the previous kernel has finished); items (row tile, token tile) go to
// the blocks of a persistent grid in turn, a row tile's token tiles next to each other. Where the
// items do not fill one wave of blocks (out_f = 5120 at up to ~128 rows) and the plan has several
// ranks, split mode gives each block one rank of an item; the ranks' sums go through the scratch
// to fp8_finish_split_kernel, which adds them in rank order (as one block's walk does) and stores.
//
// A consumer does a unit in series: stage wait, codes widened, 4 wgmma, wait, fold; its tensor
// cores idle through the widening and the fold. It cannot keep unit u + 1's products in flight
// while folding unit u (ptxas 13.0 serialises every wgmma when non-wgmma instructions read
// accumulator registers while a group is in flight: C7514). Preparing unit u + 1 (stage wait,
// widening, scales) while unit u's products ran was measured slower (docs/cuda.md gap 8).
//
// Items of 32 tokens take the quad form (linear_fp8_wgmma_quad_cuda.cuh): four classes a pass,
// 256-k stages, the same bits, in 64-, 128- or 192-row items (one, two or three consumer
// warpgroups). Which configuration a call takes: linear_fp8_wgmma_shape.h's estimate.
#include <cuda.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <utility>

#include "kernels/linear/linear_decode_common.cuh"
#include "kernels/linear/linear_fp8_common.cuh"
#include "kernels/linear/linear_fp8_walk.h"
#include "kernels/linear/linear_fp8_wgmma_common.cuh"
#include "kernels/linear/linear_fp8_wgmma_quad_cuda.cuh"
#include "kernels/linear/linear_fp8_wgmma_shape.h"
#include "kernels/linear/linear_plan.h"
#include "kernels/linear/linear_wgmma_common.cuh"
#include "kernels/linear/wgmma_cuda.cuh"
#include "kernels/tensor_map_cuda.cuh"

namespace tandem::kernels {

namespace {

using namespace decode_linear;  // NOLINT: the shared pieces of the decode kernels
using namespace fp8_linear;     // NOLINT: the FP8 kernels' arithmetic
using namespace wgmma;          // NOLINT: descriptors and the k16 step
using namespace fp8_wgmma;      // NOLINT: the FP8 wgmma kernels' parameters and units

// A configuration: kN tokens per item, kStages ring stages, kGroups consumer warpgroups (64 rows
// each; one block per SM with two, two with one). setmaxnreg as in linear_wgmma_cuda.cu.
template <int kN_, int kStages_, int kGroups_>
struct Fp8GemmCfg {
  static constexpr int kN = kN_, kStages = kStages_, kGroups = kGroups_;
  static constexpr bool kQuads = false;
  static constexpr int kTileM = 64 * kGroups, kConsumers = 128 * kGroups;
  static constexpr int kThreads = kConsumers + 128, kBlocksPerSm = kGroups == 1 ? 2 : 1;
  static constexpr int kProducerRegs = 40, kConsumerRegs = kGroups == 1 ? 216 : 232;
  static_assert(kGroups == 1 || kGroups == 2);
};

template <class C>
struct alignas(1024) Fp8Stage {
  __half x[C::kN * kStageK];       // kN tokens x 128 bytes, 128-byte swizzled (wgmma's B)
  uint8_t w[C::kTileM * kStageK];  // kTileM rows x 64 codes, as stored
};

template <class C>
struct Fp8GemmSmem {
  Fp8Stage<C> st[C::kStages];  // first: 1024-byte aligned (the swizzle atoms)
  uint64_t full[C::kStages], empty[C::kStages];
};

template <class C, class Store>
__global__ void __launch_bounds__(C::kThreads, C::kBlocksPerSm)
    linear_fp8_wgmma_kernel(const __grid_constant__ Fp8GemmParams gp) {
  constexpr int kN = C::kN, kStages = C::kStages, kTileM = C::kTileM, kConsumers = C::kConsumers;
  constexpr int kAcc = kN / 2;
  constexpr int kProducerWarp = kConsumers / 32;
  const Params& p = gp.p;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& sm = aligned_ring_smem<Fp8GemmSmem<C>>(smem_raw);
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  init_ring(sm.full, sm.empty, kConsumers / 32);  // each consumer warp releases (release_slot)
  const int first = static_cast<int>(blockIdx.x), step = static_cast<int>(gridDim.x);
  const int count = block_units(gp, first, step);
  constexpr auto kNoop = [](int) {};

  if (warp >= kProducerWarp) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::kProducerRegs) : "memory");
    if (warp != kProducerWarp || lane != 0) return;
    // fn(u, k, row tile, token tile) for every stage u of this block's items, in order.
    const auto for_stages = [&](auto&& fn) {
      uint32_t u = 0;
      for (int i = 0; i < count; ++i) {
        const Fp8Unit w = fp8_unit(gp, first + i * step);
        fp8_walk_units(
            p.in, p.range_k, w.r0, w.r1, [&](int64_t k) { fn(u++, k, w.m, w.nt); }, kNoop, kNoop);
      }
    };
    // The first stages' codes before the previous kernel has finished (weights are never written
    // by a step), their tokens after it.
    for_stages([&](uint32_t u, int64_t k, int64_t m, int64_t) {
      if (u >= kStages) return;
      cuda::mbar_arrive_expect_tx(&sm.full[u], sizeof(Fp8Stage<C>));
      cuda::tensor_load_2d(sm.st[u].w, &gp.w, k, m * kTileM, &sm.full[u]);
    });
    cuda::pdl_begin();
    for_stages([&](uint32_t u, int64_t k, int64_t m, int64_t nt) {
      const uint32_t slot = u % kStages;
      if (u >= kStages) {
        cuda::mbar_wait(&sm.empty[slot], ((u / kStages) - 1) & 1);
        cuda::mbar_arrive_expect_tx(&sm.full[slot], sizeof(Fp8Stage<C>));
        cuda::tensor_load_2d(sm.st[slot].w, &gp.w, k, m * kTileM, &sm.full[slot]);
      }
      cuda::tensor_load_2d(sm.st[slot].x, &gp.x, k, nt * kN, &sm.full[slot]);
    });
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::kConsumerRegs) : "memory");
  cuda::pdl_begin();  // out is read (kAddToOut) and written below
  // Consumer warpgroup q: rows 64 q .. of the item; its warp wi rows 16 wi ..; lane (g, t) rows g
  // and g + 8 of those, tokens 8 j + 2 t (+1) of each 8-token group j (the mma C layout).
  const int q = warp >> 2, wi = warp & 3, g = lane >> 2, t = lane & 3;
  const int wrow = q * 64 + wi * 16 + g;  // row g of this warp in the item
  uint32_t u = 0;
  const int ct = static_cast<int>(threadIdx.x);  // 0..kConsumers - 1
  for (int i = 0; i < count; ++i) {
    const Fp8Unit w = fp8_unit(gp, first + i * step);
    // The scale rows of rows g and g + 8 (scale_row).
    const int64_t row = w.m * kTileM + wrow;
    const float* scale_a = scale_row(p, row);
    const float* scale_b = scale_row(p, row + 8);
    float d0[kAcc], d1[kAcc], cls[kAcc], blk[kAcc], tot[kAcc];
#pragma unroll
    for (int e = 0; e < kAcc; ++e) cls[e] = blk[e] = tot[e] = 0.f;
    fp8_walk_units(
        p.in, p.range_k, w.r0, w.r1,
        [&](int64_t k) {  // unit u at k
          const uint32_t slot = u % kStages;
          UnitIn in;
          in.sa = __ldg(scale_a + k / kBlockK) * kTokenUnscale;
          in.sb = __ldg(scale_b + k / kBlockK) * kTokenUnscale;
          cuda::mbar_wait(&sm.full[slot], (u / kStages) & 1);
          widen_unit(&sm.st[slot].w[wrow * kStageK + 8 * t], kStageK, in);
          unit_products<kN>(in, &sm.st[slot].x[0], d0, d1);
          // The codes were read by this warp's loads (generic proxy), the tokens by the wgmma.
          cuda::release_slot(&sm.empty[slot], lane);
          fold_unit(d0, d1, in, cls);
          ++u;
        },
        [&](int c) {  // class c's sum into the range sum
#pragma unroll
          for (int e = 0; e < kAcc; ++e) {
            blk[e] = c == 0 ? cls[e] : blk[e] + cls[e];
            cls[e] = 0.f;
          }
        },
        [&](int r) {
#pragma unroll
          for (int e = 0; e < kAcc; ++e) tot[e] = r == w.r0 ? blk[e] : tot[e] + blk[e];
        });
    finish_unit<C, Store>(gp, w, q, wi, g, t, ct, tot);
  }
}

// The finishing kernels' store of item `item` from its sums tot, thread ct = threadIdx.x in
// consumer thread ct's place (warpgroup, warp and lane as the GEMM's), as store_item does there.
template <class C, class Store>
__device__ __forceinline__ void store_posted_item(const Fp8GemmParams& gp, int item,
                                                  const float (&tot)[C::kN / 2]) {
  const int ct = static_cast<int>(threadIdx.x), warp = ct >> 5, lane = ct & 31;
  const int64_t nt = item % gp.n_tiles;
  store_item<C, Store>(gp.p, item / gp.n_tiles, nt, warp >> 2, warp & 3, lane >> 2, lane & 3, tot,
                       gp.sumsq + nt * C::kN);
}

// Split mode's second half: one block per item, thread ct in consumer thread ct's place, adds the
// ranks' posted sums left to right (what one block's walk adds) and stores them as store_item
// does. It triggers the next kernel before it waits, as linear_wgmma_cuda.cu's
// finish_split_kernel does (the same contract for the kernel after it).
template <class C, class Store>
__global__ void __launch_bounds__(C::kConsumers)
    fp8_finish_split_kernel(const __grid_constant__ Fp8GemmParams gp) {
  cuda::pdl_trigger();
  cuda::pdl_wait();  // the posted sums, and out (kAddToOut), are the GEMM's
  constexpr int kAcc = C::kN / 2, kConsumers = C::kConsumers;
  const int ct = static_cast<int>(threadIdx.x);
  const int item = static_cast<int>(blockIdx.x);
  const float* posted = gp.ws + static_cast<int64_t>(item) * gp.p.splits * kAcc * kConsumers;
  float tot[kAcc];
#pragma unroll
  for (int e = 0; e < kAcc; ++e) tot[e] = __ldcg(posted + e * kConsumers + ct);
  for (int r = 1; r < gp.p.splits; ++r) {
    const float* rank = posted + static_cast<int64_t>(r) * kAcc * kConsumers;
#pragma unroll
    for (int e = 0; e < kAcc; ++e) tot[e] += __ldcg(rank + e * kConsumers + ct);
  }
  store_posted_item<C, Store>(gp, item, tot);
}

// Class halves' second part (the quad form): one block per half item, thread ct in consumer thread
// ct's place; per rank, half 0's range sum of classes 0-3 plus half 1's class sums 4, 5, 6, 7 in
// turn (the whole walk's blk + cls), the ranks left to right, then stored as store_item does. PDL
// as fp8_finish_split_kernel.
template <class C, class Store>
__global__ void __launch_bounds__(C::kConsumers)
    fp8_finish_halves_kernel(const __grid_constant__ Fp8GemmParams gp) {
  cuda::pdl_trigger();
  cuda::pdl_wait();  // the posted sums, and out (kAddToOut), are the GEMM's
  constexpr int kAcc = C::kN / 2, kConsumers = C::kConsumers;
  const int ct = static_cast<int>(threadIdx.x);
  const int item = gp.halves_from + static_cast<int>(blockIdx.x);
  float tot[kAcc];
  for (int r = 0; r < gp.p.splits; ++r) {
    const float* first = half_post<C>(gp, item, r, 0, ct);
    float blk[kAcc];
#pragma unroll
    for (int e = 0; e < kAcc; ++e) blk[e] = __ldcg(first + e * kConsumers);
#pragma unroll
    for (int c = 1; c < kHalfPosts; ++c) {
      const float* cls = half_post<C>(gp, item, r, c, ct);
#pragma unroll
      for (int e = 0; e < kAcc; ++e) blk[e] = blk[e] + __ldcg(cls + e * kConsumers);
    }
#pragma unroll
    for (int e = 0; e < kAcc; ++e) tot[e] = r == 0 ? blk[e] : tot[e] + blk[e];
  }
  store_posted_item<C, Store>(gp, item, tot);
}

// Each token's row of f16 operands for the GEMM, x' = tokens_f16(x) (the FP8 kernels' fold,
// 2^-8 and rounding), zeros from in to the padded length, every 32-k step stored in the order of
// its two k16 products (the file comment); with input_rms, the token's sum of squares of x in
// sum_squares' order. Warp w of the grid is part w % per_token of token w / per_token: the last
// part sums the squares with all of a lane's loads in one round (kTokenSumsLoads: one round for
// in <= 5,120; the same order whatever the round's size), every other part writes 1,024 k of the
// row, a lane's four 8-element groups (and their fold) loaded before the first is converted.
// One warp per token storing each group before loading the next (20 dependent round trips at in
// = 5,120) took 16.2 us at 32 tokens (ncu, H100) while the GEMM's consumers waited for it; this
// form took the 27B-FP8 step at 32 / 64 streams from 24.56 / 38.01 to 22.98 / 34.99 ms (H100,
// docs/fp8.md). It triggers the GEMM before it waits, as sum_squares_kernel does for the bf16
// kernel: the GEMM reads only codes before its own wait.
constexpr int kTokensPartK = 1024;
constexpr int kTokenSumsLoads = 20;
template <bool kFold>
__global__ void __launch_bounds__(256)
    fp8_tokens_kernel(const Params p, __half* xh, int64_t in_pad, float* sumsq, int per_token) {
  cuda::pdl_trigger();
  cuda::pdl_wait();  // x is the previous kernel's output; xh may still be read by the one before
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t task = static_cast<int64_t>(blockIdx.x) * 8 + warp;
  const int tok = static_cast<int>(task / per_token), part = static_cast<int>(task % per_token);
  if (tok >= p.n_tokens) return;
  if (part == per_token - 1) {
    if (p.input_rms) sum_squares_block<kTokenSumsLoads, 1>(p, lane, tok, sumsq);
    return;
  }
  constexpr int kGroups = kTokensPartK / (32 * 8);
  const __nv_bfloat16* x = p.x + tok * p.x_stride;
  uint32_t* row = reinterpret_cast<uint32_t*>(xh + tok * in_pad);
  const int64_t k0 = int64_t{part} * kTokensPartK + lane * 8;
  uint4 xv[kGroups], gv[kGroups];
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {  // every load first
    const int64_t k = k0 + j * 32 * 8;
    const bool inside = k < p.in;  // in is a multiple of 16: 8-groups are in or out whole
    xv[j] = inside ? __ldcg(reinterpret_cast<const uint4*>(x + k)) : make_uint4(0, 0, 0, 0);
    gv[j] = make_uint4(0, 0, 0, 0);
    if constexpr (kFold) {
      if (inside) gv[j] = __ldg(reinterpret_cast<const uint4*>(p.fold + k));
    }
  }
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    const int64_t k = k0 + j * 32 * 8;
    if (k >= in_pad) break;
    const uint4 h = tokens_f16<kFold>(xv[j], gv[j]);
    // k = 32 s + 8 tt + e: the pairs e = (0, 1), (2, 3), (4, 5), (6, 7) go to f16 positions 2 tt,
    // 8 + 2 tt, 16 + 2 tt, 24 + 2 tt of step s (16 words a step).
    uint32_t* st = row + (k / kStepK) * (kStepK / 2);
    const int tt = static_cast<int>(k % kStepK) / 8;
    st[tt] = h.x, st[4 + tt] = h.y, st[8 + tt] = h.z, st[12 + tt] = h.w;
  }
}

// ---- host side ----

int64_t padded_in(int64_t in) { return (in + kPadK - 1) / kPadK * kPadK; }

// The scratch's parts: the tokens' f16 operand rows, their sums of squares, then split mode's
// posted sums (128-byte aligned), which take what is left.
struct Fp8Scratch {
  __half* x;
  float* sumsq;
  float* ws;
  int64_t ws_bytes;
};
int64_t tokens_bytes(int64_t n, int64_t in) {
  return (n * padded_in(in) * 2 + n * 4 + 127) / 128 * 128;
}

// Bench only (linear_fp8_wgmma_set_config): 0 production's choice, 1..5 one configuration; and
// whether split mode may be used.
int g_config = 0;
bool g_split = true;
Fp8Halves g_halves = Fp8Halves::kOff;  // linear_fp8_wgmma_set_halves

// The kernel of a configuration (the quad form for Fp8QuadCfg), its shared memory, and its codes'
// box: k 64 as stored, or a quad stage's two 128-byte-swizzled halves of 128 k.
template <class C, class Store, bool kHalves = false>
constexpr auto fp8_wgmma_kernel() {
  if constexpr (C::kQuads) {
    return linear_fp8_wgmma_quad_kernel<C, Store, kHalves>;
  } else {
    return linear_fp8_wgmma_kernel<C, Store>;
  }
}
template <class C>
constexpr size_t fp8_wgmma_smem() {
  if constexpr (C::kQuads) {
    static_assert(
        sizeof(Fp8QuadStage<C>) == kFp8WalkQuad * C::kN * kStageK * 2 + C::kTileM * kQuadK,
        "a quad stage is its boxes");
    return sizeof(Fp8QuadSmem<C>) + 1024;
  } else {
    static_assert(sizeof(Fp8Stage<C>) == C::kN * kStageK * 2 + C::kTileM * kStageK,
                  "a stage is its two boxes (the bytes its full barrier expects)");
    return sizeof(Fp8GemmSmem<C>) + 1024;
  }
}

// The maps first, so that a refused one throws before anything is launched; then the tokens
// (launch_tokens) and the GEMM.
template <class C, class Store, class LaunchTokens>
void launch_kernel(const LinearShape& s, const LinearPlan& plan, const Fp8Scratch& scratch,
                   LaunchTokens&& launch_tokens, cudaStream_t stream) {
  constexpr auto kKernel = fp8_wgmma_kernel<C, Store>();
  constexpr auto kHalvesKernel = fp8_wgmma_kernel<C, Store, true>();
  constexpr size_t kSmem = fp8_wgmma_smem<C>();
  constexpr int kCodeBoxK = C::kQuads ? kQuadHalfK : kStageK;
  constexpr CUtensorMapSwizzle kCodeSwizzle =
      C::kQuads ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE;
  static_assert(kSmem * C::kBlocksPerSm <= 227 * 1024, "shared memory of an SM on sm_90");
  static const bool configured = [] {
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kSmem)));
    if constexpr (C::kQuads) {
      TANDEM_CUDA_CHECK(cudaFuncSetAttribute(
          kHalvesKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
    }
    return true;
  }();
  (void)configured;
  Fp8GemmParams gp{};
  gp.p = decode_params(s, plan, 1);
  gp.sumsq = scratch.sumsq;
  gp.n_tiles = static_cast<int>((s.n + C::kN - 1) / C::kN);
  gp.items = static_cast<int>((s.out_f + C::kTileM - 1) / C::kTileM) * gp.n_tiles;
  const int slots = cuda::sm_count() * C::kBlocksPerSm;
  // Split mode where whole items leave blocks idle, the plan has ranks to split by and the
  // scratch holds the posted sums.
  const int64_t posted_bytes =
      int64_t{gp.items} * plan.splits * (C::kN / 2) * C::kConsumers * int64_t{sizeof(float)};
  const bool split =
      g_split && gp.items < slots && plan.splits > 1 && posted_bytes <= scratch.ws_bytes;
  gp.ws = split ? scratch.ws : nullptr;
  gp.units = split ? gp.items * plan.splits : gp.items;
  // Class halves (quads; not with split mode): the last, partial wave's items as two units each
  // where they fit one wave (kRemainder), or every item (kAll, tests).
  if constexpr (C::kQuads) {
    const int rest = gp.items % slots;
    const int halved = g_halves == Fp8Halves::kAll ? gp.items
                       : g_halves == Fp8Halves::kRemainder && rest > 0 && 2 * rest <= slots ? rest
                                                                                            : 0;
    const int64_t half_bytes = int64_t{halved} * plan.splits * kHalfPosts * (C::kN / 2) *
                               C::kConsumers * int64_t{sizeof(float)};
    if (!split && halved > 0 && half_bytes <= scratch.ws_bytes) {
      gp.ws = scratch.ws;
      gp.halves = true;
      gp.halves_from = gp.items - halved;
      gp.units = gp.items + halved;
    }
  }
  const int64_t in_pad = padded_in(s.in);
  TANDEM_CHECK(
      cuda::encode_tensor_map_2d(&gp.w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, s.w, s.out_f, s.in, s.in,
                                 kCodeBoxK, C::kTileM, kCodeSwizzle) &&
          cuda::encode_tensor_map_2d(&gp.x, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, scratch.x, s.n,
                                     in_pad, in_pad, kStageK, C::kN, CU_TENSOR_MAP_SWIZZLE_128B),
      "linear (FP8 wgmma decode): the driver refused a tensor map of [{}, {}] x {} rows", s.out_f,
      s.in, s.n);
  launch_tokens();
  cuda::launch_pdl(gp.halves ? kHalvesKernel : kKernel,
                   dim3(static_cast<unsigned>(std::min(gp.units, slots))), dim3(C::kThreads), kSmem,
                   stream, gp);
  if (split) {
    cuda::launch_pdl(fp8_finish_split_kernel<C, Store>, dim3(static_cast<unsigned>(gp.items)),
                     dim3(C::kConsumers), 0, stream, gp);
  }
  if constexpr (C::kQuads) {
    if (gp.halves) {
      cuda::launch_pdl(fp8_finish_halves_kernel<C, Store>,
                       dim3(static_cast<unsigned>(gp.items - gp.halves_from)), dim3(C::kConsumers),
                       0, stream, gp);
    }
  }
}

template <class Store, class LaunchTokens>
void launch_store(const LinearShape& s, const Fp8Scratch& scratch, LaunchTokens&& launch_tokens,
                  cudaStream_t stream) {
  const LinearPlan plan = linear_fp8_plan(s.out_f, s.in);
  using A = Fp8GemmCfg<64, 12, 2>;  // 128 rows x 64 tokens, one block per SM
  using B = Fp8GemmCfg<64, 8, 1>;   // 64 x 64, two per SM
  using Cq = Fp8QuadCfg<4, 2>;      // 128 x 32 in quads, one per SM
  using Dq = Fp8QuadCfg<3, 1>;      // 64 x 32 in quads, two per SM
  using Eq = Fp8QuadCfg<3, 3>;      // 192 x 32 in quads, three consumer warpgroups, one per SM
  // Production: the configuration linear_fp8_wgmma_shape.h's estimate picks (the 64-row quads
  // up to 32 rows, the 64- or 192-row quads at 33..64, the fastest of all five from 65 rows).
  const int pick = g_config != 0 ? g_config
                                 : fp8_wgmma_pick(s.out_f, s.in, s.n, cuda::sm_count(),
                                                  g_halves == Fp8Halves::kRemainder);
  if (pick == 5) return launch_kernel<Eq, Store>(s, plan, scratch, launch_tokens, stream);
  if (pick == 1) return launch_kernel<A, Store>(s, plan, scratch, launch_tokens, stream);
  if (pick == 2) return launch_kernel<B, Store>(s, plan, scratch, launch_tokens, stream);
  if (pick == 3) return launch_kernel<Cq, Store>(s, plan, scratch, launch_tokens, stream);
  launch_kernel<Dq, Store>(s, plan, scratch, launch_tokens, stream);
}

}  // namespace

int64_t linear_fp8_wgmma_scratch_bytes(int64_t n, int64_t in) { return tokens_bytes(n, in); }

bool linear_fp8_decode_wgmma(const LinearShape& s, bool f32_out, void* scratch,
                             int64_t scratch_bytes, cudaStream_t stream) {
  if (s.n < 1 || s.n > kFp8WgmmaMaxTokens || s.in % 16 != 0 || scratch == nullptr ||
      scratch_bytes < linear_fp8_wgmma_scratch_bytes(s.n, s.in) ||
      reinterpret_cast<uintptr_t>(scratch) % 128 != 0) {
    return false;
  }
  if (f32_out && s.epilogue != LinearEpilogue::kNone) return false;
  if (s.epilogue == LinearEpilogue::kSwiGluPairs && s.out_f % kRows != 0) return false;
  auto* xh = static_cast<__half*>(scratch);
  const int64_t in_pad = padded_in(s.in);
  auto* sumsq = reinterpret_cast<float*>(xh + s.n * in_pad);
  const int64_t used = tokens_bytes(s.n, s.in);
  const Fp8Scratch parts{xh, sumsq, reinterpret_cast<float*>(static_cast<char*>(scratch) + used),
                         scratch_bytes - used};
  const Params tp = decode_params(s, LinearPlan{}, 1);
  const auto launch_tokens = [&] {
    const int per_token = static_cast<int>((in_pad + kTokensPartK - 1) / kTokensPartK) + 1;
    const dim3 grid(static_cast<unsigned>((s.n * per_token + 7) / 8));
    if (s.fold != nullptr) {
      cuda::launch_pdl(fp8_tokens_kernel<true>, grid, dim3(256), 0, stream, tp, xh, in_pad, sumsq,
                       per_token);
    } else {
      cuda::launch_pdl(fp8_tokens_kernel<false>, grid, dim3(256), 0, stream, tp, xh, in_pad, sumsq,
                       per_token);
    }
  };
  if (s.epilogue == LinearEpilogue::kSwiGluPairs) {
    launch_store<StoreSwiGluPairs>(s, parts, launch_tokens, stream);
  } else if (s.epilogue == LinearEpilogue::kAddToOut) {
    launch_store<StoreAddY>(s, parts, launch_tokens, stream);
  } else if (f32_out) {
    launch_store<StoreY<float>>(s, parts, launch_tokens, stream);
  } else {
    launch_store<StoreY<__nv_bfloat16>>(s, parts, launch_tokens, stream);
  }
  return true;
}

void linear_fp8_wgmma_set_config(int config, bool split) {
  g_config = config;
  g_split = split;
}

Fp8Halves linear_fp8_wgmma_set_halves(Fp8Halves mode) { return std::exchange(g_halves, mode); }

}  // namespace tandem::kernels
