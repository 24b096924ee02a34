// Decode/verify linear over block-scaled FP8 weights (f8_e4m3 [out, in], one f32 scale per
// scale_block_rows x 128 block; docs/fp8.md), 1..8 rows per launch, and the dequantisation that
// the prefill path runs before its bf16 GEMM.
//
// The decode kernel is the persistent bf16 kernel's design (linear_persistent_cuda.cu) with
// 1-byte weights: one launch streams every 16-row tile through a ring of shared-memory slots that
// a producer warp fills with bulk copies (one 2 KB copy per weight row per 2048-k chunk, the bf16
// kernel's copy size; one per token row), 8 consumer warps feed mma.sync m16n8k16 with the weights
// as A and each token its own B column. The end of a tile (the warp-class tree, the k-split
// ranks' sums in rank order, input_rms, the store policies) is linear_decode_common.cuh's finisher
// form: the consumers post their sums and stream on, the rms warp adds and stores them (ncu,
// gate|up at 1 row: with finish_tile the consumers spent 24% of their samples at its barrier,
// waiting for the slowest warp and warp 0's exchange and store). What differs from the bf16 kernel:
//  - the product is f16 x f16 -> fp32 (mma.sync m16n8k16 f16): a lane widens its 8 codes of rows
//    g and g + 8 with cvt e4m3x2 -> f16x2, exactly (every e4m3 value is an f16 value: one
//    instruction per 2 codes, where a bf16 widening took 4.5), and its token's 8 bf16 values times
//    2^-8 (exact) to f16 (exact for |x| in [2^-6, 2^24); below, f16's subnormal step is 2^-16 of
//    x);
//  - in a 2048-k chunk, warp w takes the 64-k units w, w + 8, w + 16 and w + 24 (half a 128-k
//    scale block each; the plan's ranges are multiples of 128, so a unit never straddles a range),
//    each as 2 steps of 32 k whose mma go to two chains; each unit's sum is added to the tile's
//    sums times the block scale of its row (rows g and g + 8 may have different scales: gate|up
//    groups of 8), one fmaf per output. The
//    scales travel in the ring slot: each producer lane copies one (cp.async) and arrives on the
//    slot's barrier when it lands (consumer loads from global before each chunk left their
//    latency exposed: 1.2-1.6 TB/s);
//  - a folded norm (LinearShape::fold, the zero-centred RMSNorm the bf16 matrices have folded in)
//    is applied to the tokens: each x element becomes bf16(x + x g) (one bf16 fma) before the
//    product; input_rms then scales by the raw x's inverse RMS, as for bf16.
// Row invariance: a token's sums depend on the plan (the weight shape and the GPU) and its own
// column only. Every configuration (token rows per slot, ring depth) has the same chunk and the
// same units per warp, and a unit past the range is skipped in all of them, so a row's bits do
// not depend on n_tokens or on the configuration (tested bitwise, 1..8 rows and decode groups). The
// numerics differ from the bf16 kernels (exact codes, f16 tokens, scale after each unit's products,
// bf16(x (1 + g)) instead of folded weights): FP8 rows are their own family, checked against the
// fp32 reference (tests/cuda/conformance_fp8_test.cpp).
#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "kernels/linear/linear_decode_common.cuh"
#include "kernels/linear/linear_fp8_common.cuh"
#include "kernels/linear/linear_plan.h"

namespace tandem::kernels {

namespace {

using namespace decode_linear;  // NOLINT: the shared pieces of the decode kernels
using namespace fp8_linear;     // NOLINT: the FP8 kernels' arithmetic
using cuda::mbar_wait;

// A configuration: token rows per slot, ring slots, and k per slot (its capacity, a multiple of
// kGroupK). A rank's range is cut into the fewest chunks of at most kChunkK whose lengths are
// multiples of kGroupK as equal as can be (Chunking): a 2560-k range of the in = 5120 shapes is
// one full 2560-k slot (2048-k slots took it as 2048 + 512, a quarter-full slot every other one).
//
// Staged (kStaged): the tokens are not in the slots; the consumers convert the block's k range of
// each token once, before streaming, into the f16 values the product takes (tokens_f16: fold,
// 2^-8, f16) in shared memory (xs), where the other configurations convert them at every step of
// every tile (a third of a step's instructions). The values are the same, so are the bits.
// kStageK_: the k per token xs holds (a range's, padded; ranges past it take another
// configuration).
template <int kXRows_, int kStages_, int kChunkK_, bool kStaged_ = false, int kStageK_ = 10240,
          int kSumBufs_ = 2>
struct Cfg {
  static constexpr int kXRows = kXRows_, kStages = kStages_, kChunkK = kChunkK_;
  static constexpr bool kStaged = kStaged_;
  // One B tile (8 token columns). input_rms: 16 loads in flight per lane of the rms warp
  // (sum_squares: 10 memory round trips for 8 tokens of 5120 before the first store, 5 for 4, 2
  // for 1-2). 32 (5, 3, 1; the same sums) made the kernel alone 2-7% faster at 8 rows but the
  // 27B-FP8 step slower on an H100 (2026-12-06: batch 1 11.07 -> 11.82 ms with it in every
  // configuration, 8 streams 12.81 -> 12.91 with it in the staged 8-row one only; registers 94 ->
  // 120, likely delaying each block's start beside the previous kernel): measured and removed.
  static constexpr int kSumBufs = kSumBufs_, kRmsLoads = 16;
  static constexpr int kWPitch = kChunkK + 32;  // bytes, 32 mod 128: 4 rows' 8-byte loads, 4 banks
  static constexpr int kStageK = kStaged ? kStageK_ : 0;  // k per token in xs
  static constexpr int kUnitsPerWarp = kChunkK / kGroupK;
  static constexpr int kScaleCols = kChunkK / kBlockK;  // blocks per slot
  static_assert(kXRows <= 8, "one B tile");
  static_assert(kChunkK % kGroupK == 0 && kBlockK % kUnitK == 0 && kStageK % kGroupK == 0);
};

// A rank's range of len k in chunks: the fewest, count = ceil(groups / (kChunkK / kGroupK)) for
// groups = ceil(len / kGroupK), the first `more` of them one group longer than the others (q
// groups), the last one ending at len. 32-bit: one division per block, none per chunk (64-bit
// divisions per chunk were a quarter of the consumers' samples).
struct Chunking {
  int len, count, q, more;
  __device__ __forceinline__ int begin(int i) const {
    return min(len, (i * q + min(i, more)) * kGroupK);
  }
};
template <class C>
__device__ __forceinline__ Chunking chunking(int64_t len) {
  constexpr int kGroupsPerChunk = C::kChunkK / kGroupK;
  const int n = static_cast<int>(len), groups = (n + kGroupK - 1) / kGroupK;
  const int count = (groups + kGroupsPerChunk - 1) / kGroupsPerChunk;
  return count == 0 ? Chunking{n, 0, 0, 0} : Chunking{n, count, groups / count, groups % count};
}

// Up to 2 tokens (decode; verify with k = 1): 4 slots of 2560 k (~223 KB), 160 KB of weights in
// flight per SM; the configuration whose occupancy the plan is made with. Staged (~218 KB) where
// the plan's range fits xs; so are 3-4 rows (3 slots, ~217 KB: verify with k = 2, 3).
using PlanCfg = Cfg<2, 4, 2560>;
using StagedCfg = Cfg<2, 4, 2560, true>;
// 5-8 rows staged (production since 2026-12-06; linear_fp8_set_staged_rows): xs of 8 tokens x 5120
// k, the bytes of the 4-row form's 4 x 10240 (~217 KB), so ranges of up to 5120 k (the in = 5120
// matrices at one rank: gate|up, in_proj, q|k|v); the consumers' work per step is the 1-4-row
// forms' (one B tile), where the batched kernel converts the tokens at every step of every tile.
// Measured (H100, kernel_bench linear_fp8 at 8 rows): 2.67 / 2.40 / 2.32 TB/s on gate|up /
// in_proj / q|k|v against the batched kernel's 2.60 / 2.26 / 2.31; the 27B-FP8 step at 8 streams
// 13.23 -> 12.87 ms (docs/fp8.md). Still below 4 rows' 2.7-2.8 TB/s, in part the rms warp's sums
// of squares before the first store (Cfg's kRmsLoads: 32 loads in flight took the kernel to 2.73
// / 2.56 / 2.45 but the step no faster).
using Staged8Cfg = Cfg<8, 3, 2560, true, 5120>;

// The deep ring (production for 1 row since 2026-12-07): where the plan's range fits 5120 k (the
// in = 5120 matrices at one rank), xs that holds just that gives its bytes to one more slot, 5
// (200 KB of weights in flight against 160; one sum buffer, for room). ncu of gate|up at 1 row
// (H200, 2026-12-06): 3.52 TB/s with the SM clock at 1.34 GHz, the same as at full clock, and
// DRAM active 73% of the cycles: the bytes in flight, not the consumers, bound it. The same plan,
// chunks and units: the same bits. The 27B-FP8 step at batch 1 (H200, one call): 8.794 -> 8.609
// ms at 1K, 9.704 -> 9.474 at 32K. 3-4 rows with 4 slots against 3 (Cfg<4, 4, 2560, true, 5120>)
// were no faster (the k = 2 / 3 verify steps +0.6% / +0.4% at 1K) and are not used.
using DeepCfg = Cfg<1, 5, 2560, true, 5120, 1>;

// Scale rows per slot: a 16-row tile lies in one block of >= 16 rows, or two of 8 (gate|up).
constexpr int kScaleGroups = 2;

template <class C, bool = C::kStaged>
struct Slot {
  uint8_t w[kRows][C::kWPitch];
  __nv_bfloat16 x[C::kXRows][C::kChunkK + 32];  // pitch 64 mod 128 bytes
  float scale[kScaleGroups][C::kScaleCols];     // the chunk's block scales of the tile's row groups
};
template <class C>
struct Slot<C, true> {
  uint8_t w[kRows][C::kWPitch];
  float scale[kScaleGroups][C::kScaleCols];
};

template <class C>
using Ring = RingSmem<Slot<C>, C::kStages, C::kSumBufs, 1, kConsumerWarps>;  // finisher form
template <class C, bool = C::kStaged>
struct Smem : Ring<C> {};
template <class C>
struct Smem<C, true> : Ring<C> {
  // The block's range of each token in f16, pitch 64 mod 128 bytes.
  alignas(16) __half xs[C::kXRows][C::kStageK + 32];
};

constexpr uint32_t kStageBarrier = 8;  // the consumer warps: xs is written (256 threads)

template <class C, bool kFold, class Store>
__global__ void __launch_bounds__(kThreads, 1) linear_fp8_kernel(const Params p) {
  constexpr int kUnits = C::kUnitsPerWarp;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<Smem<C>*>(smem_raw);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int splits = p.splits;
  const auto [rank, cluster_id, k_begin, k_end, len] = block_range(p);
  const Chunking chunks = chunking<C>(len);
  const int64_t count = chunks.count;
  const auto* w8 = reinterpret_cast<const uint8_t*>(p.w);

  // A slot is full after the producer's expect_tx and each producer lane's scale copies.
  init_barriers<C::kStages, C::kSumBufs>(sm, splits, 1 + 32);
  const bool stores = rank == 0 && cluster_id < p.tiles;
  if (warp == kRmsWarp) {
    finisher_warp<1, C::kSumBufs, C::kRmsLoads, Store>(p, sm, lane, rank, cluster_id, stores);
  } else if (warp == kProducerWarp) {
    // Lanes 0-15 copy the weight rows (past out_f: the last row again), lane t token t.
    constexpr uint32_t kSlots = C::kStages;
    const int n_x = C::kStaged ? 0 : min(p.n_tokens, C::kXRows);  // token rows per slot
    auto issue_w = [&](int64_t tile, int64_t i, uint32_t slot) {  // expects the tokens too
      const int c0 = chunks.begin(static_cast<int>(i));
      const auto bytes = static_cast<uint32_t>(chunks.begin(static_cast<int>(i) + 1) - c0);
      if (lane == 0) cuda::mbar_arrive_expect_tx(&sm.full[slot], bytes * (kRows + 2u * n_x));
      __syncwarp();
      const int64_t row = min(tile * kRows + lane, p.out_f - 1);
      if (lane < kRows) {
        cuda::bulk_copy(&sm.ring[slot].w[lane][0], w8 + row * p.in + k_begin + c0, bytes,
                        &sm.full[slot]);
      }
      // Scale e of the slot: block e % kScaleCols of the chunk in row group e / kScaleCols of the
      // tile (clamped inside the scale tensor; values past the range or the rows are never read),
      // then one arrival per lane.
      const int64_t group0 = (tile * kRows) >> p.scale_shift, last = (p.out_f - 1) >> p.scale_shift;
      for (int e = lane; e < kScaleGroups * C::kScaleCols; e += 32) {
        const int64_t group = min(group0 + e / C::kScaleCols, last);
        const int64_t col = min((k_begin + c0) / kBlockK + e % C::kScaleCols, p.scale_cols - 1);
        cuda::copy4(&sm.ring[slot].scale[e / C::kScaleCols][e % C::kScaleCols],
                    p.w_scale + group * p.scale_cols + col);
      }
      cuda::copies_arrive(&sm.full[slot]);
    };
    auto issue_x = [&](int64_t i, uint32_t slot) {
      if constexpr (!C::kStaged) {
        if (lane >= n_x) return;
        const int c0 = chunks.begin(static_cast<int>(i));
        cuda::bulk_copy(&sm.ring[slot].x[lane][0], p.x + lane * p.x_stride + k_begin + c0,
                        static_cast<uint32_t>(2 * (chunks.begin(static_cast<int>(i) + 1) - c0)),
                        &sm.full[slot]);
      }
    };
    produce_tiles<kSlots>(p, sm, cluster_id, count, issue_w, issue_x);
  } else {
    cluster_wait(splits);
    cuda::pdl_begin();
    const int g = lane >> 2, t = lane & 3;
    if constexpr (C::kStaged) {
      // xs[tok][k] for the range's k and every token of the call, zeros up to the end of the last
      // group (read by a partial group's lanes past lim, whose weights are zeroed too). A thread
      // takes 8 k of every token at once: all its tokens' loads (and the fold's, once) in flight
      // together, ceil(eights / 256) round trips in all (token by token, 8 rows took 20).
      const int n_x = min(p.n_tokens, C::kXRows);
      const int eights = (static_cast<int>(len) + kGroupK - 1) / kGroupK * (kGroupK / 8);
      for (int e = warp * 32 + lane; e < eights; e += kConsumerWarps * 32) {
        const int k = e * 8;
        uint4 xv[C::kXRows], f = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int tok = 0; tok < C::kXRows; ++tok) {
          xv[tok] =
              tok < n_x && k < len
                  ? __ldcg(reinterpret_cast<const uint4*>(p.x + tok * p.x_stride + k_begin + k))
                  : make_uint4(0, 0, 0, 0);
        }
        if constexpr (kFold) {
          if (k < len) f = __ldg(reinterpret_cast<const uint4*>(p.fold + k_begin + k));
        }
#pragma unroll
        for (int tok = 0; tok < C::kXRows; ++tok) {
          if (tok < n_x) *reinterpret_cast<uint4*>(&sm.xs[tok][k]) = tokens_f16<kFold>(xv[tok], f);
        }
      }
      cuda::named_barrier(kStageBarrier, kConsumerWarps * 32);
    }
    uint32_t it = 0, use = 0;
    for (int64_t tile = cluster_id; tile < p.tiles; tile += p.clusters, ++use) {
      float c[1][4] = {{0.f, 0.f, 0.f, 0.f}};
      // The slot's scale rows of rows g and g + 8 (clamped as the producer clamps the rows).
      const int64_t group0 = (tile * kRows) >> p.scale_shift;
      const int ga =
          static_cast<int>((min(tile * kRows + g, p.out_f - 1) >> p.scale_shift) - group0);
      const int gb =
          static_cast<int>((min(tile * kRows + g + 8, p.out_f - 1) >> p.scale_shift) - group0);
      // Lane group g feeds B column g, token g; columns past n_tokens read whatever the slot
      // holds in row min(g, kXRows - 1) (stale bytes, NaN among them): a column's products never
      // reach another column, and the finisher stores tokens below n_tokens only.
      const int x_row = min(g, C::kXRows - 1);
      for (int64_t i = 0; i < count; ++i, ++it) {
        const uint32_t slot = it % C::kStages, round = it / C::kStages;
        const int c0 = chunks.begin(static_cast<int>(i));
        const int64_t k0 = k_begin + c0;
        const int lim = chunks.begin(static_cast<int>(i) + 1) - c0;  // k in the slot: 16 x
        // This chunk's folded-norm values, loaded before the wait (staged: folded already).
        constexpr bool kFoldHere = kFold && !C::kStaged;
        uint4 gv[kFoldHere ? kUnits * kStepsPerUnit : 1];
        if constexpr (kFoldHere) {
#pragma unroll
          for (int j = 0; j < kUnits * kStepsPerUnit; ++j) {
            const int kl = unit_k(j / kStepsPerUnit, warp) + (j % kStepsPerUnit) * kStepK + 8 * t;
            gv[j] = kl < lim ? __ldg(reinterpret_cast<const uint4*>(p.fold + k0 + kl))
                             : make_uint4(0, 0, 0, 0);
          }
        }
        mbar_wait(&sm.full[slot], round & 1);
        const Slot<C>& src = sm.ring[slot];
        // Unit u of this warp: its 2 steps in two chains, then one scale per row (the unit's
        // block's). Checked (the chunk's last, partial group): a lane's 8 k past lim are zeros
        // (lim is a multiple of 16, so they are all in or all out; past it the slot holds stale
        // bytes, NaN codes among them before the first fill). The arithmetic is the same.
        auto run_unit = [&](int u, auto checked) {
          const int ku = unit_k(u, warp);
          float d[2][4] = {};
#pragma unroll
          for (int s = 0; s < kStepsPerUnit; ++s) {
            const int kl = ku + s * kStepK + 8 * t;
            const bool ok = !decltype(checked)::value || kl < lim;
            uint2 qa = *reinterpret_cast<const uint2*>(&src.w[g][kl]);
            uint2 qb = *reinterpret_cast<const uint2*>(&src.w[g + 8][kl]);
            uint4 xh;  // the tokens_f16 of token x_row's 8 k
            if constexpr (C::kStaged) {
              xh = *reinterpret_cast<const uint4*>(&sm.xs[x_row][c0 + kl]);
              if (!ok) qa = qb = make_uint2(0, 0), xh = make_uint4(0, 0, 0, 0);
            } else {
              uint4 xv = *reinterpret_cast<const uint4*>(&src.x[x_row][kl]);
              if (!ok) qa = qb = make_uint2(0, 0), xv = make_uint4(0, 0, 0, 0);
              uint4 f = make_uint4(0, 0, 0, 0);
              if constexpr (kFold) {
                // The tail unit's index is not a constant: its values come from global memory.
                f = decltype(checked)::value
                        ? (ok ? __ldg(reinterpret_cast<const uint4*>(p.fold + k0 + kl)) : f)
                        : gv[u * kStepsPerUnit + s];
              }
              xh = tokens_f16<kFold>(xv, f);
            }
            // Lane (g, t): k 0..7 of its step in order, a0 = row g (k0, k1), a1 = row g + 8,
            // a2 = row g (k2, k3), ...: the bf16 kernel's permutation, the same for the tokens.
            mma_f16(d[s], widen2(qa.x), widen2(qb.x), widen2(qa.x >> 16), widen2(qb.x >> 16), xh.x,
                    xh.y);
            mma_f16(d[s], widen2(qa.y), widen2(qb.y), widen2(qa.y >> 16), widen2(qb.y >> 16), xh.z,
                    xh.w);
          }
          const float sa = src.scale[ga][ku / kBlockK] * kTokenUnscale;
          const float sb = src.scale[gb][ku / kBlockK] * kTokenUnscale;
          c[0][0] = fmaf(d[0][0] + d[1][0], sa, c[0][0]);
          c[0][1] = fmaf(d[0][1] + d[1][1], sa, c[0][1]);
          c[0][2] = fmaf(d[0][2] + d[1][2], sb, c[0][2]);
          c[0][3] = fmaf(d[0][3] + d[1][3], sb, c[0][3]);
        };
        // Whole groups: every warp runs the same units, unchecked; then the partial last group.
        const int whole = lim / kGroupK;
#pragma unroll
        for (int u = 0; u < kUnits; ++u) {
          if (u < whole) run_unit(u, std::false_type{});
        }
        if (whole < kUnits && unit_k(whole, warp) < lim) run_unit(whole, std::true_type{});
        cuda::release_slot(&sm.empty[slot], lane);
      }
      post_tile_sums<1, C::kSumBufs>(sm, c, use, warp, lane);
    }
  }
}

template <class C, bool kFold, class Store>
void allow_smem() {
  static const bool done = [] {
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(linear_fp8_kernel<C, kFold, Store>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(sizeof(Smem<C>))));
    return true;
  }();
  (void)done;
}

// The cluster occupancy the FP8 plan is made with (the plan configuration's, measured once).
const std::array<int64_t, 4>& fp8_plan_resident() {
  static const std::array<int64_t, 4> n = [] {
    using Store = StoreY<__nv_bfloat16>;
    allow_smem<PlanCfg, false, Store>();
    return measure_resident_clusters(linear_fp8_kernel<PlanCfg, false, Store>,
                                     static_cast<int>(sizeof(Smem<PlanCfg>)));
  }();
  return n;
}

template <class C, bool kFold, class Store>
void launch_cfg(const LinearShape& s, const LinearPlan& plan, cudaStream_t stream) {
  static_assert(sizeof(Smem<C>) <= 227 * 1024, "shared memory of one block on sm_90");
  allow_smem<C, kFold, Store>();
  const Params p = decode_params(s, plan, plan.clusters);
  cuda::launch_pdl_cluster(linear_fp8_kernel<C, kFold, Store>,
                           static_cast<unsigned>(plan.clusters * plan.splits), kThreads,
                           static_cast<unsigned>(plan.splits), sizeof(Smem<C>), stream, p);
}

bool g_staging = true;      // linear_fp8_set_staging (kernel_bench)
bool g_staged_rows = true;  // linear_fp8_set_staged_rows (kernel_bench, tests)
int g_plan_splits = 0;      // linear_fp8_set_plan_splits (kernel_bench): 0 = plan_linear's
bool g_deep_ring = true;    // linear_fp8_set_deep_ring (kernel_bench, tests)

// Whether configuration C's xs holds a rank's range of the plan.
template <class C>
bool fits_xs(const LinearPlan& plan) {
  return (plan.range_k + kGroupK - 1) / kGroupK * kGroupK <= C::kStageK;
}

bool stages_rows(const LinearPlan& plan, int64_t n) {
  return n > 4 && n <= 8 && g_staging && g_staged_rows && fits_xs<Staged8Cfg>(plan);
}

template <bool kFold, class Store>
void launch_n(const LinearShape& s, cudaStream_t stream) {
  const LinearPlan plan = linear_fp8_plan(s.out_f, s.in);
  const bool staged = fits_xs<StagedCfg>(plan) && g_staging;
  if (s.n == 1 && g_deep_ring && g_staging && fits_xs<DeepCfg>(plan)) {
    return launch_cfg<DeepCfg, kFold, Store>(s, plan, stream);
  }
  if (s.n <= 2 && staged) return launch_cfg<StagedCfg, kFold, Store>(s, plan, stream);
  if (s.n <= 2) return launch_cfg<PlanCfg, kFold, Store>(s, plan, stream);
  if (s.n <= 4 && staged) return launch_cfg<Cfg<4, 3, 2560, true>, kFold, Store>(s, plan, stream);
  if (s.n <= 4) return launch_cfg<Cfg<4, 3, 2560>, kFold, Store>(s, plan, stream);  // ~203 KB
  if (stages_rows(plan, s.n)) return launch_cfg<Staged8Cfg, kFold, Store>(s, plan, stream);
  launch_cfg<Cfg<8, 3, 2048>, kFold, Store>(s, plan, stream);  // ~216 KB
}

template <class Store>
void launch_store(const LinearShape& s, cudaStream_t stream) {
  s.fold != nullptr ? launch_n<true, Store>(s, stream) : launch_n<false, Store>(s, stream);
}

// out[o, i] = bf16(f32(w[o, i]) scale[o / r, i / 128] (1 + g_i)): 16 elements per thread.
__global__ void fp8_dequantize_kernel(const uint8_t* __restrict__ w,
                                      const float* __restrict__ scale, int scale_shift,
                                      int64_t scale_cols, const __nv_bfloat16* __restrict__ fold,
                                      int64_t rows, int64_t in, __nv_bfloat16* __restrict__ out) {
  const int64_t groups = rows * (in / 16);
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < groups;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = q / (in / 16), i0 = (q % (in / 16)) * 16;
    const float sc = scale[(o >> scale_shift) * scale_cols + i0 / kBlockK];
    const uint4 codes = *reinterpret_cast<const uint4*>(w + o * in + i0);
    const auto* c = reinterpret_cast<const __nv_fp8_e4m3*>(&codes);
    alignas(16) __nv_bfloat16 v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      float f = static_cast<float>(c[j]) * sc;
      if (fold != nullptr) f *= 1.f + __bfloat162float(fold[i0 + j]);
      v[j] = __float2bfloat16_rn(f);
    }
    auto* dst = reinterpret_cast<uint4*>(out + o * in + i0);
    dst[0] = reinterpret_cast<const uint4*>(v)[0];
    dst[1] = reinterpret_cast<const uint4*>(v)[1];
  }
}

}  // namespace

LinearPlan linear_fp8_plan(int64_t out_f, int64_t in) {
  const int64_t tiles = (out_f + kRows - 1) / kRows;
  if (g_plan_splits > 0) {  // kernel_bench only: another plan, other bits
    const LinearPlan p = plan_linear_splits(tiles, in, g_plan_splits, fp8_plan_resident(), kBlockK);
    if (plan_linear_splits_ok(p, in, fp8_plan_resident())) return p;
  }
  return plan_linear_fp8(tiles, in, kPlanChunkK, fp8_plan_resident(), cuda::sm_count(), kBlockK);
}

void linear_fp8_decode(const LinearShape& s, bool f32_out, cudaStream_t stream) {
  TANDEM_CHECK(s.n >= 1 && s.n <= kFp8DecodeMaxTokens,
               "linear_fp8_decode: {} tokens (1 to {} per call)", s.n, kFp8DecodeMaxTokens);
  TANDEM_CHECK(s.epilogue == LinearEpilogue::kNone ||
                   (!f32_out && (s.epilogue == LinearEpilogue::kAddToOut || s.out_f % kRows == 0)),
               "linear_fp8_decode: the epilogues need bf16 out, and swiglu a multiple of {} rows, "
               "got out_f {}",
               kRows, s.out_f);
  if (s.epilogue == LinearEpilogue::kSwiGluPairs) return launch_store<StoreSwiGluPairs>(s, stream);
  if (s.epilogue == LinearEpilogue::kAddToOut) return launch_store<StoreAddY>(s, stream);
  f32_out ? launch_store<StoreY<float>>(s, stream) : launch_store<StoreY<__nv_bfloat16>>(s, stream);
}

void linear_fp8_set_staging(bool on) { g_staging = on; }
bool linear_fp8_set_staged_rows(bool on) { return std::exchange(g_staged_rows, on); }
bool linear_fp8_decode_stages_rows(const LinearShape& s) {
  if (s.n <= 4 || s.n > 8 || !g_staging || !g_staged_rows) return false;  // no plan to make
  return stages_rows(linear_fp8_plan(s.out_f, s.in), s.n);
}
void linear_fp8_set_plan_splits(int splits) { g_plan_splits = splits; }
bool linear_fp8_set_deep_ring(bool on) { return std::exchange(g_deep_ring, on); }

void linear_fp8_dequantize(const LinearShape& s, void* out, cudaStream_t stream) {
  const int64_t groups = s.out_f * (s.in / 16);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((groups + 255) / 256, 8192));
  fp8_dequantize_kernel<<<blocks, 256, 0, stream>>>(
      static_cast<const uint8_t*>(s.w), s.w_scale,
      __builtin_ctzll(static_cast<unsigned long long>(s.scale_block_rows)), (s.in + 127) / 128,
      static_cast<const __nv_bfloat16*>(s.fold), s.out_f, s.in, static_cast<__nv_bfloat16*>(out));
  cuda::check_launch("fp8_dequantize_kernel");
}

}  // namespace tandem::kernels
