// Decode/verify linear on wgmma (Hopper's warpgroup tensor-core instruction): production for the
// decode groups linear_decode_takes_wgmma gives it, the persistent kernel's bits
// (linear_persistent_cuda.cu) at any row count.
//
// The decode order (linear_plan.h) is one a GEMM can walk: an output is the left-to-right sum of
// its ranks' sums, each the left-to-right sum of 8 class chains, each chain natural k16 steps over
// its 128-k pieces of the rank's 1024-k chunks in increasing k. A block computes a 64- or 128-row
// x kN-token item with one or two consumer warpgroups (64 rows each, wgmma m64nNk16 with both
// operands in 128-byte-swizzled shared memory) and walks, for each rank, class 0's pieces, then
// class 1's, ...: three accumulator sets (the class chain, the range sum, the total) replace the 8
// accumulators a block needed in the interleaved order. The probes (mma_bits_probe.cu; the
// natural-order probe, in git at 47b8f8d) showed that wgmma's m64nNk16 sums equal mma.sync
// m16n8k16's on natural k sets, chained; every row is checked bitwise against the persistent
// kernel's and against the order's specification (linear_order_spec_cuda.cu).
//
// Roles: one or two consumer warpgroups (64 weight rows each: 64-row items at two blocks per SM
// for matrices with few row tiles, else 128-row items at one) and a producer warpgroup that gives
// up its registers (setmaxnreg); its first warp fills a ring of 64-k stages (one tensor-map box of
// the item's weight rows and one of its kN token rows each, the first stages' weights before the
// previous kernel has finished). input_rms: each token's sum of squares (sum_squares' order) comes
// from a small kernel launched just before, once per call, into the workspace; without the
// workspace the producer warpgroup's other warps sum each item's tokens. Items (row tile, token
// tile) go to the blocks of a persistent grid in turn, the token tiles of a row tile next to each
// other so that its weights come from L2 after the first. Items left over after whole waves of
// block slots (all of them when they are fewer than the slots: out_f = 5120 has 80 items of 64
// rows for 264 slots; gate|up 8 of 128 rows after two waves of 132) are split (split mode,
// linear_split.h): a unit takes one rank of such an item, or a group of its classes, and posts its
// sums to the workspace (the rank's sum, or each class's chain sum); finish_split_kernel, launched
// next, adds them class by class, rank by rank, as one block would (the order of additions is the
// same either way) and runs the epilogue. (An in-kernel finish, the last unit of an item found by
// a counter, stalled every unit on the counter's round trip: 1.6-2.6 TB/s, b95ec03.)
#include <cuda.h>

#include <algorithm>
#include <iterator>

#include "kernels/linear/linear_decode_common.cuh"
#include "kernels/linear/linear_plan.h"
#include "kernels/linear/linear_split.h"
#include "kernels/linear/linear_wgmma_common.cuh"
#include "kernels/linear/linear_wgmma_shape.h"
#include "kernels/linear/wgmma_cuda.cuh"
#include "kernels/tensor_map_cuda.cuh"

namespace tandem::kernels {

namespace {

using namespace decode_linear;  // NOLINT: the shared pieces of the decode kernels
using namespace wgmma;          // NOLINT: descriptors and the k16 step

constexpr int kStageK = 64;     // k per ring stage: one 128-byte swizzle row
constexpr int kSumsqWarps = 3;  // warps 1..3 of the producer warpgroup
constexpr uint32_t kSumsqPosted0 = 1, kSumsqRead0 = 3;
static_assert(kPieceK % kStageK == 0);

// A configuration: kN tokens per item, kStages ring stages, kGroups consumer warpgroups (64 rows
// each: 128-row items one block per SM, or 64-row items two blocks per SM for calls with few row
// tiles). The producer warpgroup gives its registers to the consumers (setmaxnreg: .inc takes only
// what a .dec of the same block released, with less it waits forever): 128 x (168 - 40) =
// 256 x (232 - 168) at one block per SM, 128 x (128 - 40) = 128 x (216 - 128) at two.
template <int kN_, int kStages_, int kGroups_>
struct GemmCfg {
  static constexpr int kN = kN_, kStages = kStages_, kGroups = kGroups_;
  static constexpr int kTileM = 64 * kGroups, kConsumers = 128 * kGroups;
  static constexpr int kThreads = kConsumers + 128, kBlocksPerSm = kGroups == 1 ? 2 : 1;
  static constexpr int kProducerRegs = 40, kConsumerRegs = kGroups == 1 ? 216 : 232;
  static constexpr uint32_t kSumsqThreads = kConsumers + 32 * kSumsqWarps;
  static_assert(kGroups == 1 || kGroups == 2);
};

template <class C>
struct alignas(1024) Stage {
  __nv_bfloat16 w[C::kTileM * kStageK];  // kTileM rows x 128 bytes, swizzled
  __nv_bfloat16 x[C::kN * kStageK];      // kN tokens x 128 bytes, swizzled
};

template <class C>
struct GemmSmem {
  Stage<C> st[C::kStages];  // first: 1024-byte aligned (the swizzle atoms)
  uint64_t full[C::kStages], empty[C::kStages];
  float sumsq[2][C::kN];  // input_rms without the workspace, by item parity
};

struct GemmParams {
  Params p;  // the shape, the plan (splits, range_k), input_rms
  CUtensorMap w, x;
  // Split mode: the posted sums, [split item][rank][piece][accumulator][consumer thread], a piece
  // being the rank's sum (cgroups 1) or one class's chain sum (cgroups > 1: kLinearClasses per
  // rank).
  float* ws;
  // input_rms with the workspace: each token's sum of squares, written by sum_squares_kernel
  // before this launch; null: warps 9..11 sum each item's tokens themselves (every row tile again).
  const float* sumsq;
  int n_tiles, items, units;
  LinearSplit split;  // linear_split.h: whole items, then split ones
};

// A unit of work (linear_split.h) and its item's row tile m and token tile nt.
struct Unit : LinearUnit {
  int64_t m, nt;
};
__device__ __forceinline__ Unit unit_of(const GemmParams& gp, int u) {
  Unit w;
  static_cast<LinearUnit&>(w) = linear_split_unit(gp.split, gp.p.splits, u);
  w.m = w.item / gp.n_tiles;
  w.nt = w.item % gp.n_tiles;
  return w;
}

// The decode order's walk of a unit's 64-k stages: per rank, class c0's pieces of every chunk,
// then class c0 + 1's, ...; stage(k) for each, end_class(r, c) after a class, end_rank(r) after a
// rank.
template <class Stage, class EndClass, class EndRank>
__device__ __forceinline__ void walk(const Params& p, const Unit& w, Stage&& stage,
                                     EndClass&& end_class, EndRank&& end_rank) {
  for (int r = w.r0; r < w.r1; ++r) {
    const int64_t k0 = r * p.range_k, len = min(p.in, k0 + p.range_k) - k0;
    const int64_t chunks = (len + kLinearPlanChunkK - 1) / kLinearPlanChunkK;
    for (int c = w.c0; c < w.c1; ++c) {
      for (int64_t i = 0; i < chunks; ++i) {
#pragma unroll
        for (int h = 0; h < static_cast<int>(kPieceK / kStageK); ++h) {
          const int64_t off = i * kLinearPlanChunkK + c * kPieceK + h * kStageK;
          if (off < len) stage(k0 + off);
        }
      }
      end_class(r, c);
    }
    end_rank(r);
  }
}

// Split mode's second half: one block per split item, thread ct in consumer thread ct's place,
// adds the item's posted sums in the decode order (class chains left to right within a rank,
// ranks left to right: what one block's walk adds) and stores them as store_item does. It
// triggers the next kernel before it waits, as sum_squares_kernel does: that kernel may start
// while the wgmma kernel still runs, and reads only what three or more launches back wrote
// before its own pdl_wait (weights; a recurrent state, whose writer is never a linear).
template <class C, class Store>
__global__ void __launch_bounds__(C::kConsumers)
    finish_split_kernel(const __grid_constant__ GemmParams gp) {
  cuda::pdl_trigger();
  cuda::pdl_wait();  // the posted sums, and out (kAddToOut), are the wgmma kernel's
  constexpr int kAcc = C::kN / 2, kConsumers = C::kConsumers;
  const int ct = static_cast<int>(threadIdx.x), warp = ct >> 5, lane = ct & 31;
  const int split = static_cast<int>(blockIdx.x);
  const Unit w = unit_of(gp, gp.split.whole + split * gp.split.parts);  // the item's first unit
  const int all = static_cast<int>(linear_split_pieces(gp.p.splits, gp.split.cgroups));
  const int pieces = all / gp.p.splits;
  const float* posted =
      gp.ws + linear_split_piece(split, 0, 0, gp.p.splits, gp.split.cgroups) * kAcc * kConsumers;
  float blk[kAcc], tot[kAcc];
  constexpr int kBatch = kAcc >= 64 ? 1 : 64 / kAcc;  // pieces in flight at a time
  for (int q0 = 0; q0 < all; q0 += kBatch) {
    float v[kBatch][kAcc];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const float* piece = posted + static_cast<int64_t>(q0 + b) * kAcc * kConsumers;
#pragma unroll
      for (int e = 0; e < kAcc; ++e)
        v[b][e] = q0 + b < all ? __ldcg(piece + e * kConsumers + ct) : 0.f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int qi = q0 + b, c = qi % pieces;
      if (qi >= all) break;
#pragma unroll
      for (int e = 0; e < kAcc; ++e) {
        blk[e] = c == 0 ? v[b][e] : blk[e] + v[b][e];
        if (c == pieces - 1) tot[e] = qi < pieces ? blk[e] : tot[e] + blk[e];
      }
    }
  }
  store_item<C, Store>(gp.p, w.m, w.nt, warp >> 2, warp & 3, lane >> 2, lane & 3, tot,
                       gp.sumsq + w.nt * C::kN);
}

template <class C, class Store>
__global__ void __launch_bounds__(C::kThreads, C::kBlocksPerSm)
    linear_wgmma_kernel(const __grid_constant__ GemmParams gp) {
  constexpr int kN = C::kN, kStages = C::kStages, kTileM = C::kTileM, kConsumers = C::kConsumers;
  constexpr int kAcc = kN / 2;
  constexpr int kProducerWarp = kConsumers / 32;
  const Params& p = gp.p;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& sm = aligned_ring_smem<GemmSmem<C>>(smem_raw);
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  init_ring(sm.full, sm.empty, kConsumers / 32);  // lane 0 of each consumer warp releases
  const int first = static_cast<int>(blockIdx.x), step = static_cast<int>(gridDim.x);
  const int count = first < gp.units ? (gp.units - first + step - 1) / step : 0;
  constexpr auto kNoop = [](int) {};

  if (warp >= kProducerWarp) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(C::kProducerRegs) : "memory");
    if (warp == kProducerWarp) {
      if (lane != 0) return;
      // fn(u, k, unit) for every stage u of this block's units, in order.
      const auto for_stages = [&](auto&& fn) {
        uint32_t u = 0;
        for (int i = 0; i < count; ++i) {
          const Unit w = unit_of(gp, first + i * step);
          walk(
              p, w, [&](int64_t k) { fn(u++, k, w); }, [](int, int) {}, kNoop);
        }
      };
      // The first stages' weights before the previous kernel has finished (weights are never
      // written by a step), their tokens after it.
      for_stages([&](uint32_t u, int64_t k, const Unit& w) {
        if (u >= kStages) return;
        cuda::mbar_arrive_expect_tx(&sm.full[u], sizeof(Stage<C>));
        cuda::tensor_load_2d(sm.st[u].w, &gp.w, k, w.m * kTileM, &sm.full[u]);
      });
      cuda::pdl_begin();
      for_stages([&](uint32_t u, int64_t k, const Unit& w) {
        const uint32_t slot = u % kStages;
        if (u >= kStages) {
          cuda::mbar_wait(&sm.empty[slot], ((u / kStages) - 1) & 1);
          cuda::mbar_arrive_expect_tx(&sm.full[slot], sizeof(Stage<C>));
          cuda::tensor_load_2d(sm.st[slot].w, &gp.w, k, w.m * kTileM, &sm.full[slot]);
        }
        cuda::tensor_load_2d(sm.st[slot].x, &gp.x, k, w.nt * kN, &sm.full[slot]);
      });
      return;
    }
    if (!p.input_rms || gp.sumsq != nullptr) return;
    // Warps 1..3 of the warpgroup: each token's sum of squares, per unit into sumsq[unit parity].
    cuda::pdl_begin();  // x is the previous kernel's output
    for (int i = 0; i < count; ++i) {
      const Unit w = unit_of(gp, first + i * step);
      const uint32_t b = static_cast<uint32_t>(i) & 1;
      if (i >= 2) cuda::named_barrier(kSumsqRead0 + b, C::kSumsqThreads);
      Params pt = p;
      pt.x = p.x + w.nt * kN * p.x_stride;
      const int nt = min(kN, static_cast<int>(p.n_tokens - w.nt * kN));
      for (int t = warp - kProducerWarp - 1; t < nt; t += kSumsqWarps)
        sum_squares_block<2, 1>(pt, lane, t, sm.sumsq[b]);
      cuda::named_barrier_arrive(kSumsqPosted0 + b, C::kSumsqThreads);
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(C::kConsumerRegs) : "memory");
  cuda::pdl_begin();  // out is read (kAddToOut) and written below
  // Consumer warpgroup q: rows 64 q .. of the item; its warp wi rows 16 wi ..; lane (g, t) rows g
  // and g + 8 of those, tokens 8 j + 2 t (+1) of each 8-token group j (the mma C layout).
  const int q = warp >> 2, wi = warp & 3, g = lane >> 2, t = lane & 3;
  const int ct = static_cast<int>(threadIdx.x);  // 0..kConsumers - 1
  uint32_t u = 0;
  for (int i = 0; i < count; ++i) {
    const int unit = first + i * step;
    const Unit w = unit_of(gp, unit);
    float acc[kAcc], blk[kAcc], tot[kAcc];
#pragma unroll
    for (int e = 0; e < kAcc; ++e) acc[e] = blk[e] = tot[e] = 0.f;
    int pending = -1;  // the slot whose wgmma may still read it
    // A split unit posts its sums (linear_split_piece); each class's chain sum with class groups.
    const bool split = w.split >= 0, groups = split && gp.split.cgroups > 1;
    const auto posted = [&](int r, int c) {
      return gp.ws +
             linear_split_piece(w.split, r, c, p.splits, gp.split.cgroups) * kAcc * kConsumers;
    };
    walk(
        p, w,
        [&](int64_t) {
          const uint32_t slot = u % kStages;
          cuda::mbar_wait(&sm.full[slot], (u / kStages) & 1);
          const uint64_t a = sw128_desc(&sm.st[slot].w[q * 64 * kStageK]);
          const uint64_t bd = sw128_desc(&sm.st[slot].x[0]);
          wg_fence();
#pragma unroll
          for (int kk = 0; kk < kStageK / 16; ++kk) wgmma_k16<kN>(acc, a + 2 * kk, bd + 2 * kk);
          wg_commit();
          wg_wait<1>();  // the previous stage's wgmma are done: release its slot
          if (pending >= 0 && lane == 0) cuda::mbar_arrive(&sm.empty[pending]);
          pending = static_cast<int>(slot);
          ++u;
        },
        [&](int r, int c) {
          wg_wait<0>();
          if (pending >= 0 && lane == 0) cuda::mbar_arrive(&sm.empty[pending]);
          pending = -1;
          if (groups) {  // post the class's chain sum
            float* mine = posted(r, c);
#pragma unroll
            for (int e = 0; e < kAcc; ++e) __stcg(mine + e * kConsumers + ct, acc[e]);
          }
#pragma unroll
          for (int e = 0; e < kAcc; ++e) {
            blk[e] = c == 0 ? acc[e] : blk[e] + acc[e];
            acc[e] = 0.f;
          }
        },
        [&](int r) {
#pragma unroll
          for (int e = 0; e < kAcc; ++e) tot[e] = r == w.r0 ? blk[e] : tot[e] + blk[e];
        });

    // A split unit posts its rank's sum (its class sums went at each class's end); the item's
    // sum and its epilogue are finish_split_kernel's.
    if (split && !groups) {
      float* mine = posted(w.r0, 0);
#pragma unroll
      for (int e = 0; e < kAcc; ++e) __stcg(mine + e * kConsumers + ct, tot[e]);
    }
    const uint32_t b = static_cast<uint32_t>(i) & 1;
    const bool own_sums = p.input_rms && gp.sumsq == nullptr;  // warps 9..11's
    if (own_sums) cuda::named_barrier(kSumsqPosted0 + b, C::kSumsqThreads);
    if (!split)
      store_item<C, Store>(p, w.m, w.nt, q, wi, g, t, tot,
                           own_sums ? sm.sumsq[b] : gp.sumsq + w.nt * kN);
    if (own_sums && i + 2 < count) cuda::named_barrier_arrive(kSumsqRead0 + b, C::kSumsqThreads);
  }
}

// input_rms: each token's sum of squares in sum_squares' order, one warp per token, into sumsq
// (the workspace), once per call instead of once per row tile.
// It lets the wgmma kernel launch at once (trigger, then wait): that kernel reads only weights
// before its own pdl_wait, which returns once this kernel, and so the one before, has completed.
// Waiting first, as every other kernel does, kept the wgmma kernel from starting (and fetching
// weights) until these sums were done: ~0.9 ms per 27B step at 8 streams (bench variant 14).
// All of a lane's loads in one round (sum_squares_block<20, 1>, the same order) made the 27B bf16
// step 0.1-0.35 ms slower at 16-64 streams on an H100 (twenty-second session): 4 per round stays.
__global__ void __launch_bounds__(256) sum_squares_kernel(const Params p, float* sumsq) {
  cuda::pdl_trigger();
  cuda::pdl_wait();  // x is the previous kernel's output
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int tok = static_cast<int>(blockIdx.x) * 8 + warp;
  if (tok < p.n_tokens) sum_squares_block<4, 1>(p, lane, tok, sumsq);
}

// ---- host side ----

// Split mode's workspace (linear_reserve_decode_workspace); never destroyed, since a static's
// destructor would run after the CUDA runtime has shut down. Its parts: the posted sums
// (kLinearSplitPostedFloats), the sums of squares (kWgmmaMaxTokens).
Tensor& g_workspace = *new Tensor();
// Calls of up to this many rows sum their tokens' squares in the kernel (every item again) rather
// than in sum_squares_kernel (linear_cuda.cuh): at 8 rows the 27B step was 1.3% faster in one
// A/B run (15.50 against 15.70 ms at 8 streams, 6b61d49; two runs at 51cbecd gave 15.74 and
// 15.73: the gain is within run-to-run noise), at 16 rows 1.5% slower (17.17 against 16.91).
int64_t g_inkernel_sums_rows = kInKernelSumsRows;
// Split mode's rule: production, or bench variant 15's or 16's (linear_split.h).
LinearSplitRule g_split_rule = LinearSplitRule::kProduction;
// The item shape's rule (linear_wgmma_shape.h): production, or bench variant 18's or 19's.
WgmmaShapeRule g_shape_rule = WgmmaShapeRule::kProduction;
// Bench only (linear_wgmma_force_shape): one item shape for every call; tile_m 0: the rule's.
WgmmaItemShape g_forced_shape{0, 0};

bool g_workspace_ready = false;
bool workspace_ready() { return g_workspace_ready; }
float* workspace_sumsq() { return g_workspace.data<float>() + kLinearSplitPostedFloats; }

// Split mode (linear_split.h), when the workspace is there.
template <class C>
LinearSplit pick_split(int items, const LinearPlan& plan, int slots) {
  if (!workspace_ready()) return {items, 1, 1};
  const LinearSplitCall call{items, slots, C::kTileM, int64_t{C::kN / 2} * C::kConsumers, kStageK};
  return pick_linear_split(call, plan, g_split_rule, kLinearSplitPostedFloats,
                           kLinearSplitMaxItems);
}

template <class C, class Store>
void launch_kernel(const LinearShape& s, const LinearPlan& plan, cudaStream_t stream) {
  constexpr size_t kSmem = sizeof(GemmSmem<C>) + 1024;
  static_assert(kSmem * C::kBlocksPerSm <= 227 * 1024, "shared memory of an SM on sm_90");
  static const bool configured = [] {
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(linear_wgmma_kernel<C, Store>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kSmem)));
    return true;
  }();
  (void)configured;
  GemmParams gp{};
  gp.p = decode_params(s, plan, 1);
  gp.n_tiles = static_cast<int>((s.n + C::kN - 1) / C::kN);
  gp.items = static_cast<int>((s.out_f + C::kTileM - 1) / C::kTileM) * gp.n_tiles;
  const int slots = cuda::sm_count() * C::kBlocksPerSm;
  gp.split = pick_split<C>(gp.items, plan, slots);
  gp.units = linear_split_units(gp.items, gp.split);
  const bool split = gp.split.whole < gp.items;
  if (split) gp.ws = g_workspace.data<float>();
  // The maps first, so that a refused one throws before anything is launched.
  TANDEM_CHECK(
      cuda::encode_tensor_map_2d(&gp.w, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, s.w, s.out_f, s.in,
                                 s.in, kStageK, C::kTileM, CU_TENSOR_MAP_SWIZZLE_128B) &&
          cuda::encode_tensor_map_2d(&gp.x, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, s.x, s.n, s.in,
                                     s.x_stride, kStageK, C::kN, CU_TENSOR_MAP_SWIZZLE_128B),
      "linear (wgmma decode): the driver refused a tensor map of [{}, {}] x {} rows", s.out_f, s.in,
      s.n);
  // finish_split_kernel takes its sums of squares from the workspace.
  if (s.input_rms && workspace_ready() && (s.n > g_inkernel_sums_rows || split)) {
    float* sumsq = workspace_sumsq();
    cuda::launch_pdl(sum_squares_kernel, dim3(static_cast<unsigned>((s.n + 7) / 8)), dim3(256), 0,
                     stream, gp.p, sumsq);
    gp.sumsq = sumsq;
  }
  cuda::launch_pdl(linear_wgmma_kernel<C, Store>,
                   dim3(static_cast<unsigned>(std::min(gp.units, slots))), dim3(C::kThreads), kSmem,
                   stream, gp);
  if (split) {
    cuda::launch_pdl(finish_split_kernel<C, Store>,
                     dim3(static_cast<unsigned>(gp.items - gp.split.whole)), dim3(C::kConsumers), 0,
                     stream, gp);
  }
}

// kTokens per item (16, 32 or 64; fewer leave room for more stages, i.e. more weight bytes in
// flight per SM) and kGroups consumer warpgroups.
template <int kGroups, class Store>
void launch_narrow(int tokens, const LinearShape& s, const LinearPlan& plan, cudaStream_t stream) {
  constexpr bool kOne = kGroups == 2;  // one block per SM (else two): its stages
  if (tokens == 64) {
    return launch_kernel<GemmCfg<64, kOne ? 8 : 6, kGroups>, Store>(s, plan, stream);
  }
  if (tokens == 32) {
    return launch_kernel<GemmCfg<32, kOne ? 10 : 8, kGroups>, Store>(s, plan, stream);
  }
  launch_kernel<GemmCfg<16, kOne ? 12 : 10, kGroups>, Store>(s, plan, stream);
}

// The item shape by wgmma_shape (linear_wgmma_shape.h: production the rows rule up to 64 rows, the
// cost rule above; bench variants 18 and 19 one rule throughout). The rows rule: 128 x 128 items
// where they fill the GPU twice over (from 256 rows they stream 1.1-1.5x faster than 64-token ones
// on the 27B shapes: natural-order-probe-h200.json); 128-row items where they are many; else 64-row
// items, two blocks per SM, so that matrices of few row tiles (out_f = 5120: 40 of 128 rows) still
// spread over the GPU.
template <class Store>
void launch_store(const LinearShape& s, cudaStream_t stream) {
  const int sms = cuda::sm_count();
  const int64_t tiles = (s.out_f + kRows - 1) / kRows;
  const LinearPlan plan =
      plan_linear(tiles, s.in, kLinearPlanChunkK, linear_plan_resident(), sms, kLinearRangeAlign);
  const WgmmaItemShape shape = g_forced_shape.tile_m != 0
                                   ? g_forced_shape
                                   : wgmma_shape({s.out_f, s.in, s.n, plan, sms}, workspace_ready(),
                                                 g_split_rule, g_shape_rule);
  if (shape.n == 128) {
    return launch_kernel<GemmCfg<128, 6, 2>, Store>(s, plan, stream);
  }
  if (shape.tile_m == 128) return launch_narrow<2, Store>(shape.n, s, plan, stream);
  launch_narrow<1, Store>(shape.n, s, plan, stream);
}

}  // namespace

bool linear_decode_wgmma(const LinearShape& s, bool f32_out, cudaStream_t stream) {
  if (!s.vec_ok || s.n < 1 || s.n > kWgmmaMaxTokens) return false;
  if (s.epilogue == LinearEpilogue::kSwiGluPairs) {
    if (s.out_f % kRows != 0 || f32_out) return false;
    launch_store<StoreSwiGluPairs>(s, stream);
  } else if (s.epilogue == LinearEpilogue::kAddToOut) {
    if (f32_out) return false;
    launch_store<StoreAddY>(s, stream);
  } else if (f32_out) {
    launch_store<StoreY<float>>(s, stream);
  } else {
    launch_store<StoreY<__nv_bfloat16>>(s, stream);
  }
  return true;
}

void linear_wgmma_set_inkernel_sums(int64_t max_rows) { g_inkernel_sums_rows = max_rows; }
void linear_wgmma_set_shape_rule(int rule) {
  g_shape_rule = rule == 1   ? WgmmaShapeRule::kCost
                 : rule == 2 ? WgmmaShapeRule::kRows
                             : WgmmaShapeRule::kProduction;
}
void linear_wgmma_force_shape(int tile_m, int n) {
  const WgmmaItemShape shape{tile_m, n};
  TANDEM_CHECK(tile_m == 0 || std::find(std::begin(kWgmmaItemShapes), std::end(kWgmmaItemShapes),
                                        shape) != std::end(kWgmmaItemShapes),
               "linear (wgmma decode): no {} x {} item shape is built", tile_m, n);
  g_forced_shape = tile_m == 0 ? WgmmaItemShape{0, 0} : shape;
}
void linear_wgmma_set_split_rule(int rule) {
  g_split_rule = rule == 1   ? LinearSplitRule::kBefore
                 : rule == 2 ? LinearSplitRule::kClassGroups
                             : LinearSplitRule::kProduction;
}

void linear_reserve_decode_workspace(Device device) {
  if (device != Device::kCuda || workspace_ready()) return;
  // The posted sums and input_rms's sums of squares.
  g_workspace =
      Tensor::zeros({kLinearSplitPostedFloats + kWgmmaMaxTokens}, DType::kF32, Device::kCuda);
  g_workspace_ready = true;
}

}  // namespace tandem::kernels
