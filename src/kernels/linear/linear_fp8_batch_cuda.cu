// Batched FP8 decode/verify linear (production: decode groups of 5..kFp8BatchMaxTokens rows): the
// FP8 kernel's arithmetic (linear_fp8_cuda.cu) with the tokens shared by several weight tiles, as
// linear_batch_cuda.cu does for bf16. linear_fp8_cuda.cu serves 1..8 rows per launch, so 32 rows
// (8 streams verifying k = 3, or 32 decoding) read the weights 4 times; here a ring slot holds a
// super-tile of kRowTiles consecutive 16-row tiles and the chunk's tokens once, and one launch
// reads the weights once for up to 32 rows.
//
// Same bits as linear_fp8_cuda.cu, by construction:
//  - the same plan (linear_fp8_plan: splits and range_k, multiples of 128 k);
//  - a chunk is one group (kGroupK = 512 k counted from the range start): warp w runs the range's
//    64-k units w, w + 8, ... in increasing order, a unit that starts past the range is skipped,
//    a unit the range cuts runs with the lanes past its end zeroed (weights and tokens);
//  - a unit is the same two steps in two chains of two mma.sync m16n8k16 f16 each, with the same
//    fragments (codes widened exactly, tokens through tokens_f16: fold, 2^-8, f16), then one fmaf
//    per output with the unit's block scale times 2^8;
//  - the end of a tile: finish_tiles in the rms warp (the warp tree, the ranks in order,
//    input_rms, the store), linear_fp8_cuda.cu's finisher, while the consumers stream on.
// Which cluster computes a tile and how many tokens share a slot change no addition.
//
// Copies: tensor maps, per 512-k chunk one box of the super-tile's weight rows (512 bytes a row:
// the map counts the codes in pairs, since a box row holds at most 256 elements) and two boxes of
// 256 k of the tokens (512-byte rows, as in the bf16 batched kernel), plus the chunk's block scales
// of the super-tile's row groups (one cp.async per producer lane). Measured against four 128-k
// boxes in the 128-byte swizzle (conflict-free fragment loads, where these 512-byte rows put the
// 4 rows of a half-warp's 8-byte loads on the same banks): 0-13% faster at 16-32 rows, -4..+12%
// at 1-8 (bench/results/logs/h200-run9).
#include <cuda.h>

#include <algorithm>
#include <array>

#include "kernels/linear/linear_decode_common.cuh"
#include "kernels/linear/linear_fp8_common.cuh"
#include "kernels/linear/linear_plan.h"
#include "kernels/tensor_map_cuda.cuh"

namespace tandem::kernels {

namespace {

using namespace decode_linear;  // NOLINT: the shared pieces of the decode kernels
using namespace fp8_linear;     // NOLINT: the FP8 kernels' arithmetic
using cuda::mbar_wait;

constexpr int kChunkK = kGroupK;  // one unit per consumer warp
constexpr int kXBoxK = 256;       // tokens per box row (512 bytes)
constexpr int kScaleCols = kChunkK / kBlockK;

// B tiles (8 tokens each), 16-row tiles per super-tile, ring slots, tile-sum buffers.
template <int kNTiles_, int kRowTiles_, int kStages_, int kSumBufs_>
struct Fp8BatchCfg {
  static constexpr int kNTiles = kNTiles_, kRowTiles = kRowTiles_, kStages = kStages_;
  static constexpr int kSumBufs = kSumBufs_;
  static constexpr int kXRows = 8 * kNTiles;
  static constexpr int kWRows = kRows * kRowTiles;
  static constexpr int kXBoxes = kChunkK / kXBoxK;
  // Scale row groups a super-tile can touch with blocks of >= 8 rows (it starts at a multiple of
  // 16 rows).
  static constexpr int kScaleRows = kWRows / 8 + 1;
  static constexpr int kRmsLoads = kNTiles >= 4 ? 32 : 16;
  static_assert(kNTiles * kRowTiles <= 16, "accumulators and token fragments fit the registers");
  static_assert(kWRows <= 256 && kXRows <= 256, "a box's sides are <= 256");
};

// One ring slot: the chunk's weight rows (one box, 512 bytes a row) and its tokens (two boxes).
template <class C>
struct Fp8BatchSlot {
  uint8_t w[C::kWRows][kChunkK];
  __nv_bfloat16 x[C::kXBoxes][C::kXRows][kXBoxK];
};

template <class C>
struct Fp8BatchSmem
    : RingSmem<Fp8BatchSlot<C>, C::kStages, C::kSumBufs, C::kNTiles, kConsumerWarps> {
  static_assert(sizeof(Fp8BatchSlot<C>) % 128 == 0, "slots keep the boxes 128-byte aligned");
  float scale[C::kStages][C::kScaleRows][kScaleCols];  // the chunk's scales of the row groups
};

template <class C>
constexpr int kSmemBytes = static_cast<int>(sizeof(Fp8BatchSmem<C>));

struct Fp8BatchParams {
  Params p;             // tiles: 16-row tiles; clusters: clusters launched
  CUtensorMap w_super;  // FP8 box [kChunkK, kWRows] (as pairs of codes)
  CUtensorMap w_tile;   // FP8 box [kChunkK, 16]
  CUtensorMap x;        // bf16 box [kXBoxK, kXRows]
};

template <class C, bool kFold, class Store>
__global__ void __launch_bounds__(kThreads, 1)
    linear_fp8_batch_kernel(const __grid_constant__ Fp8BatchParams bp) {
  constexpr int kNTiles = C::kNTiles, kRowTiles = C::kRowTiles;
  const Params& p = bp.p;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<Fp8BatchSmem<C>*>(smem_raw);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int splits = p.splits;
  const auto [rank, cluster_id, k_begin, k_end, len] = block_range(p);
  const int64_t count = (len + kChunkK - 1) / kChunkK;
  // This cluster's tiles (p.clusters <= p.tiles: none is empty).
  const int64_t t_begin = cluster_id * p.tiles / p.clusters;
  const int64_t t_end = (cluster_id + 1) * p.tiles / p.clusters;

  // A slot is full after the producer's expect_tx and each producer lane's scale copies.
  init_barriers<C::kStages, C::kSumBufs>(sm, splits, 1 + 32);
  const bool stores = rank == 0 && t_begin < t_end;
  if (warp == kRmsWarp) {
    finish_tiles<kNTiles, C::kSumBufs, C::kRmsLoads, Store>(p, sm, lane, rank, t_begin, 1,
                                                            t_end - t_begin, stores);
  } else if (warp == kProducerWarp) {
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&bp.w_super))
                   : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&bp.x))
                   : "memory");
    }
    constexpr uint32_t kSlots = C::kStages;
    const int64_t last_group = (p.out_f - 1) >> p.scale_shift;
    // Chunk i of the super-tile's weight rows (one box, or one per tile when the super-tile is
    // cut short) and its block scales; expects the tokens' bytes too. A box is whole: k past the
    // range is stale, masked by the consumers; rows past out_f arrive as zeros.
    auto issue_w = [&](int64_t tile0, int rows_tiles, int64_t i, uint32_t slot) {
      const int64_t k = k_begin + i * kChunkK;
      if (lane == 0) {
        const uint32_t bytes = (rows_tiles * kRows + 2 * C::kXRows) * kChunkK;
        cuda::mbar_arrive_expect_tx(&sm.full[slot], bytes);
        // The maps count 2-byte pairs of codes: k / 2.
        if (rows_tiles == kRowTiles) {
          cuda::tensor_load_2d(&sm.ring[slot].w[0][0], &bp.w_super, k / 2, tile0 * kRows,
                               &sm.full[slot]);
        } else {
          for (int r = 0; r < rows_tiles; ++r) {
            cuda::tensor_load_2d(&sm.ring[slot].w[r * kRows][0], &bp.w_tile, k / 2,
                                 (tile0 + r) * kRows, &sm.full[slot]);
          }
        }
      }
      // Scale e: block e % kScaleCols of the chunk in row group e / kScaleCols of the super-tile,
      // clamped inside the scale tensor (values past the range or the rows are never read).
      const int64_t group0 = (tile0 * kRows) >> p.scale_shift;
      for (int e = lane; e < C::kScaleRows * kScaleCols; e += 32) {
        const int64_t group = min(group0 + e / kScaleCols, last_group);
        const int64_t col = min(k / kBlockK + e % kScaleCols, p.scale_cols - 1);
        cuda::copy4(&sm.scale[slot][e / kScaleCols][e % kScaleCols],
                    p.w_scale + group * p.scale_cols + col);
      }
      cuda::copies_arrive(&sm.full[slot]);
    };
    auto issue_x = [&](int64_t i, uint32_t slot) {
      if (lane != 0) return;
      for (int b = 0; b < C::kXBoxes; ++b) {
        cuda::tensor_load_2d(&sm.ring[slot].x[b][0][0], &bp.x, k_begin + i * kChunkK + b * kXBoxK,
                             0, &sm.full[slot]);
      }
    };
    produce_super_tiles<kSlots, kRowTiles>(sm, splits, t_begin, t_end, count, issue_w, issue_x);
  } else {
    cluster_wait(splits);
    cuda::pdl_begin();
    const int g = lane >> 2, t = lane & 3;
    const int ku = warp * kUnitK;  // this warp's unit in every chunk
    const uint4 zero = make_uint4(0, 0, 0, 0);
    uint32_t it = 0, use = 0;
    for (int64_t tile0 = t_begin; tile0 < t_end; tile0 += kRowTiles) {
      const int mt = static_cast<int>(min(int64_t{kRowTiles}, t_end - tile0));
      // The scale row groups of rows g and g + 8 of each tile, relative to the super-tile's
      // first (rows past out_f clamped as the producer clamps them).
      const int64_t group0 = (tile0 * kRows) >> p.scale_shift;
      int ga[kRowTiles], gb[kRowTiles];
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) {
        const int64_t row = tile0 * kRows + r * kRows + g;
        ga[r] = static_cast<int>((min(row, p.out_f - 1) >> p.scale_shift) - group0);
        gb[r] = static_cast<int>((min(row + 8, p.out_f - 1) >> p.scale_shift) - group0);
      }
      float c[kRowTiles][kNTiles][4];
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int q = 0; q < 4; ++q) c[r][j][q] = 0.f;
        }
      }
      for (int64_t i = 0; i < count; ++i, ++it) {
        const uint32_t slot = it % C::kStages, round = it / C::kStages;
        const int lim = static_cast<int>(min(int64_t{kChunkK}, len - i * kChunkK));
        const bool run = ku < lim;               // the unit starts inside the range
        const bool checked = ku + kUnitK > lim;  // the range ends inside the unit
        // The unit's folded-norm values, loaded before the wait.
        uint4 gv[kStepsPerUnit] = {};
        if constexpr (kFold) {
#pragma unroll
          for (int s = 0; s < kStepsPerUnit; ++s) {
            const int kl = ku + s * kStepK + 8 * t;
            if (run && kl < lim) {
              gv[s] = __ldg(reinterpret_cast<const uint4*>(p.fold + k_begin + i * kChunkK + kl));
            }
          }
        }
        mbar_wait(&sm.full[slot], round & 1);
        if (run) {
          const Fp8BatchSlot<C>& src = sm.ring[slot];
          // The tokens_f16 of token 8j + g's 8 k of each step (zeros past the range).
          uint4 xh[kStepsPerUnit][kNTiles];
#pragma unroll
          for (int s = 0; s < kStepsPerUnit; ++s) {
            const int kl = ku + s * kStepK + 8 * t;
            const bool ok = !checked || kl < lim;
#pragma unroll
            for (int j = 0; j < kNTiles; ++j) {
              const uint4 xv =
                  ok ? *reinterpret_cast<const uint4*>(&src.x[kl / kXBoxK][j * 8 + g][kl % kXBoxK])
                     : zero;
              xh[s][j] = tokens_f16<kFold>(xv, gv[s]);
            }
          }
#pragma unroll
          for (int r = 0; r < kRowTiles; ++r) {
            if (r >= mt) break;
            float d[kNTiles][kStepsPerUnit][4];
#pragma unroll
            for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
              for (int s = 0; s < kStepsPerUnit; ++s) {
#pragma unroll
                for (int q = 0; q < 4; ++q) d[j][s][q] = 0.f;
              }
            }
#pragma unroll
            for (int s = 0; s < kStepsPerUnit; ++s) {
              const int kl = ku + s * kStepK + 8 * t;
              const bool ok = !checked || kl < lim;
              const uint2 qa = ok ? *reinterpret_cast<const uint2*>(&src.w[r * kRows + g][kl])
                                  : make_uint2(0, 0);
              const uint2 qb = ok ? *reinterpret_cast<const uint2*>(&src.w[r * kRows + g + 8][kl])
                                  : make_uint2(0, 0);
              // Lane (g, t): k 0..7 of its step, a0 = row g (k0, k1), a1 = row g + 8, a2 = row g
              // (k2, k3), ...: linear_fp8_cuda.cu's fragments. Every token tile's first mma, then
              // every second one: each output adds the step's halves in order.
              const uint32_t a0 = widen2(qa.x), a1 = widen2(qb.x);
              const uint32_t a2 = widen2(qa.x >> 16), a3 = widen2(qb.x >> 16);
#pragma unroll
              for (int j = 0; j < kNTiles; ++j) {
                mma_f16(d[j][s], a0, a1, a2, a3, xh[s][j].x, xh[s][j].y);
              }
              const uint32_t b0 = widen2(qa.y), b1 = widen2(qb.y);
              const uint32_t b2 = widen2(qa.y >> 16), b3 = widen2(qb.y >> 16);
#pragma unroll
              for (int j = 0; j < kNTiles; ++j) {
                mma_f16(d[j][s], b0, b1, b2, b3, xh[s][j].z, xh[s][j].w);
              }
            }
            const float sa = sm.scale[slot][ga[r]][ku / kBlockK] * kTokenUnscale;
            const float sb = sm.scale[slot][gb[r]][ku / kBlockK] * kTokenUnscale;
#pragma unroll
            for (int j = 0; j < kNTiles; ++j) {
              c[r][j][0] = fmaf(d[j][0][0] + d[j][1][0], sa, c[r][j][0]);
              c[r][j][1] = fmaf(d[j][0][1] + d[j][1][1], sa, c[r][j][1]);
              c[r][j][2] = fmaf(d[j][0][2] + d[j][1][2], sb, c[r][j][2]);
              c[r][j][3] = fmaf(d[j][0][3] + d[j][1][3], sb, c[r][j][3]);
            }
          }
        }
        cuda::release_slot(&sm.empty[slot], lane);
      }
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) {
        if (r >= mt) break;
        post_tile_sums<kNTiles, C::kSumBufs>(sm, c[r], use, warp, lane);
        ++use;
      }
    }
  }
}

// ---- host side ----

template <class C, bool kFold, class Store>
const std::array<int64_t, 4>& fp8_batch_resident() {
  static const std::array<int64_t, 4> n = [] {
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(linear_fp8_batch_kernel<C, kFold, Store>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           kSmemBytes<C>));
    return measure_resident_clusters(linear_fp8_batch_kernel<C, kFold, Store>, kSmemBytes<C>);
  }();
  return n;
}

template <class C, bool kFold, class Store>
bool launch_cfg(const LinearShape& s, cudaStream_t stream) {
  static_assert(kSmemBytes<C> <= 227 * 1024, "shared memory of one block on sm_90");
  if (s.n > C::kXRows) return false;
  const int64_t tiles = (s.out_f + kRows - 1) / kRows;
  const LinearPlan plan = linear_fp8_plan(s.out_f, s.in);
  int e = 0;
  while ((1 << e) < plan.splits) ++e;
  const int64_t clusters =
      std::min(tiles, fp8_batch_resident<C, kFold, Store>()[static_cast<size_t>(e)]);
  if (clusters < 1) return false;
  Fp8BatchParams bp{};
  bp.p = decode_params(s, plan, clusters);
  if (!linear_encode_fp8_rows(&bp.w_super, s.w, s.out_f, s.in, kChunkK, C::kWRows) ||
      !linear_encode_fp8_rows(&bp.w_tile, s.w, s.out_f, s.in, kChunkK, kRows) ||
      !linear_encode_rows(&bp.x, s.x, s.n, s.in, s.x_stride, kXBoxK, C::kXRows)) {
    return false;
  }
  cuda::launch_pdl_cluster(linear_fp8_batch_kernel<C, kFold, Store>,
                           static_cast<unsigned>(clusters * plan.splits), kThreads,
                           static_cast<unsigned>(plan.splits), kSmemBytes<C>, stream, bp);
  return true;
}

// The configuration by token count (64-row super-tiles; 32 KB of weights a slot): 5 slots up to 8
// tokens, 4 up to 16, 3 up to 32 (the tokens' bf16 rows then take as much room as the weights).
template <bool kFold, class Store>
bool launch_n(const LinearShape& s, cudaStream_t stream) {
  if (s.n <= 8) return launch_cfg<Fp8BatchCfg<1, 4, 5, 2>, kFold, Store>(s, stream);
  if (s.n <= 16) return launch_cfg<Fp8BatchCfg<2, 4, 4, 2>, kFold, Store>(s, stream);
  return launch_cfg<Fp8BatchCfg<4, 4, 3, 1>, kFold, Store>(s, stream);
}

template <class Store>
bool launch_store(const LinearShape& s, cudaStream_t stream) {
  return s.fold != nullptr ? launch_n<true, Store>(s, stream) : launch_n<false, Store>(s, stream);
}

}  // namespace

bool linear_fp8_decode_batch(const LinearShape& s, bool f32_out, cudaStream_t stream) {
  // Scale blocks of fewer than 8 rows would need more scale rows per slot than it holds.
  if (s.n < 1 || s.n > kFp8BatchMaxTokens || s.scale_block_rows < 8) return false;
  if (s.epilogue == LinearEpilogue::kSwiGluPairs) return launch_store<StoreSwiGluPairs>(s, stream);
  if (s.epilogue == LinearEpilogue::kAddToOut) return launch_store<StoreAddY>(s, stream);
  return f32_out ? launch_store<StoreY<float>>(s, stream)
                 : launch_store<StoreY<__nv_bfloat16>>(s, stream);
}

bool linear_encode_rows(CUtensorMap* map, const void* base, int64_t rows, int64_t cols,
                        int64_t stride, int box_k, int box_rows) {
  return cuda::encode_tensor_map_2d(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, rows, cols,
                                    stride, box_k, box_rows);
}

bool linear_encode_fp8_rows(CUtensorMap* map, const void* base, int64_t rows, int64_t cols,
                            int box_k, int box_rows) {
  if (cols % 2 != 0 || box_k % 2 != 0) return false;
  return cuda::encode_tensor_map_2d(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, base, rows, cols / 2,
                                    cols / 2, box_k / 2, box_rows);
}

}  // namespace tandem::kernels
