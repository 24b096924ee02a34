// Batched decode/verify linear (5..64 rows in production; any 1..64 as a bench variant): the
// persistent kernel's arithmetic (linear_persistent_cuda.cu) with the tokens shared by several
// weight tiles. A decode group streams every weight once; what limited the persistent kernel at
// 32 rows was not DRAM but the fill of shared memory: it copies a chunk's token rows again for
// every 16-row tile, so 32 tokens moved twice the weight bytes into shared memory (~1.5 TB/s of
// weights). Here a ring slot holds a super-tile of kRowTiles consecutive 16-row tiles and the
// tokens once: at 32 tokens and 4 tiles (64 rows) the tokens add half the weight bytes.
//
// Same bits as the persistent kernel, by construction: the same plan (plan_linear of the 16-row
// tiles with the production configuration's occupancy: `splits` ranks and range_k, which fix a
// row's order of additions; the number of clusters only changes who computes a tile), the same
// warp classes (warp w takes k-steps w, w + 8, ... of each 256-k chunk, masked steps to
// linear_masked_end after a range's last chunk), the same fragment loads and mma sequence per
// (tile, token), and the same end of a tile (finish_tile: warp tree, ranks in order, input_rms,
// store, here in the finisher form: the rms warp ends the tiles while the consumers stream on).
// Each row tile of a super-tile keeps its own accumulators.
//
// Copies: tensor maps (TMA, cp.async.bulk.tensor.2d), per 256-k chunk one box of the weights
// (16 x kRowTiles rows, or one of 16 rows per tile for a super-tile cut short) and one of the
// tokens (kXRows rows; rows past n_tokens and k past `in` arrive as zeros), 512 bytes a row. Boxes
// of 32 k (64-byte rows, conflict-free fragment loads) streamed only 2.5-3.6 TB/s at one token
// on the 27B shapes, against the bulk copies' 3.4-4.1: narrow boxes are slow to fetch. With
// 512-byte rows, rows g and g + 1 of a quarter-warp's 16-byte loads share banks (a 2-way conflict),
// which the shared-memory pipe absorbs: at 32 tokens and 4 tiles a chunk's loads take ~800 of its
// ~3000 DRAM cycles. Work split: cluster c takes the contiguous tiles [c T / C, (c + 1) T / C) in
// super-tiles of kRowTiles, the last one shorter. Tried and dropped: the consumers reading the
// tokens from L2 into registers a chunk ahead, the ring holding weights only (6 slots instead of 4
// at 32 rows): 6-37% slower on every 27B shape and row count (d4a9083..76ef3b6, variant 15).
#include <cuda.h>

#include <algorithm>
#include <array>

#include "kernels/linear/linear_decode_common.cuh"
#include "kernels/linear/linear_plan.h"
#include "kernels/tensor_map_cuda.cuh"

namespace tandem::kernels {

namespace {

using namespace decode_linear;  // NOLINT: the shared pieces of both decode kernels
using cuda::mbar_wait;

constexpr int kStepK = 32;  // k per mma k-step pair (one 16-byte fragment per lane)

// B tiles (8 tokens each), 16-row tiles per super-tile, ring slots, tile-sum buffers.
template <int kNTiles_, int kRowTiles_, int kStages_, int kSumBufs_>
struct BatchCfg {
  static constexpr int kNTiles = kNTiles_, kRowTiles = kRowTiles_, kStages = kStages_;
  static constexpr int kSumBufs = kSumBufs_;
  static constexpr int kChunkK = 256;  // 8 k-steps: one per consumer warp
  static constexpr int kSteps = kChunkK / kStepK;
  static constexpr int kStepsPerWarp = kSteps / kConsumerWarps;
  static constexpr int kXRows = 8 * kNTiles;
  static constexpr int kWRows = kRows * kRowTiles;
  static constexpr int kRmsLoads = kNTiles >= 4 ? 32 : 16;
  // A k-step's token fragments stay in registers across the row tiles, next to the accumulators
  // (kRowTiles x kNTiles x 4): more than 64 of those spill at the 168 registers of 10 warps.
  static_assert(kNTiles * kRowTiles <= 16, "accumulators and token fragments fit the registers");
  static_assert(kStepsPerWarp >= 1 && kSteps % kConsumerWarps == 0);
  static_assert(kLinearPlanChunkK % kChunkK == 0, "chunks tile the plan's chunks (masked steps)");
  static_assert(kWRows <= 256 && kXRows <= 256 && kChunkK <= 256, "a box's sides are <= 256");
  static_assert(kSumBufs >= 1 && kSumBufs <= kMaxSumBufs);
};

// One ring slot: a box of the super-tile's rows and one of the tokens, [row][k], 512 bytes a row.
template <class C>
struct BatchSlot {
  __nv_bfloat16 w[C::kWRows][C::kChunkK];
  __nv_bfloat16 x[C::kXRows][C::kChunkK];
};

template <class C>
using BatchSmem = RingSmem<BatchSlot<C>, C::kStages, C::kSumBufs, C::kNTiles, kConsumerWarps>;

struct BatchParams {
  Params p;             // tiles: 16-row tiles; clusters: clusters launched
  CUtensorMap w_super;  // box [kChunkK, kWRows]
  CUtensorMap w_tile;   // box [kChunkK, 16]
  CUtensorMap x;        // box [kChunkK, kXRows]
};

template <class C, class Store>
__global__ void __launch_bounds__(kThreads, 1)
    linear_batch_kernel(const __grid_constant__ BatchParams bp) {
  constexpr int kNTiles = C::kNTiles, kRowTiles = C::kRowTiles, kChunkK = C::kChunkK;
  const Params& p = bp.p;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<BatchSmem<C>*>(smem_raw);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int splits = p.splits;
  const auto [rank, cluster_id, k_begin, k_end, len] = block_range(p);
  const int64_t count = (len + kChunkK - 1) / kChunkK;
  // This cluster's tiles (p.clusters <= p.tiles: none is empty).
  const int64_t t_begin = cluster_id * p.tiles / p.clusters;
  const int64_t t_end = (cluster_id + 1) * p.tiles / p.clusters;

  init_barriers<C::kStages, C::kSumBufs>(sm, splits);
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
    // Lane 0 copies chunk i of the super-tile's rows (one box, or one per tile when cut short)
    // and, in issue_x, of the tokens. A box is whole: k past the range is stale, masked by the
    // consumers, k past `in` and rows past out_f or n_tokens arrive as zeros.
    auto issue_w = [&](int64_t tile0, int rows_tiles, int64_t i, uint32_t slot) {
      if (lane != 0) return;
      const uint32_t bytes = (rows_tiles * kRows + C::kXRows) * kChunkK * 2;
      cuda::mbar_arrive_expect_tx(&sm.full[slot], bytes);
      const int64_t k = k_begin + i * kChunkK;
      if (rows_tiles == kRowTiles) {
        cuda::tensor_load_2d(&sm.ring[slot].w[0][0], &bp.w_super, k, tile0 * kRows, &sm.full[slot]);
      } else {
        for (int r = 0; r < rows_tiles; ++r) {
          cuda::tensor_load_2d(&sm.ring[slot].w[r * kRows][0], &bp.w_tile, k, (tile0 + r) * kRows,
                               &sm.full[slot]);
        }
      }
    };
    auto issue_x = [&](int64_t i, uint32_t slot) {
      if (lane == 0) {
        cuda::tensor_load_2d(&sm.ring[slot].x[0][0], &bp.x, k_begin + i * kChunkK, 0,
                             &sm.full[slot]);
      }
    };
    produce_super_tiles<kSlots, kRowTiles>(sm, splits, t_begin, t_end, count, issue_w, issue_x);
  } else {
    cluster_wait(splits);
    cuda::pdl_begin();
    const int g = lane >> 2, t = lane & 3;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    uint32_t it = 0, use = 0;
    for (int64_t tile0 = t_begin; tile0 < t_end; tile0 += kRowTiles) {
      const int mt = static_cast<int>(min(int64_t{kRowTiles}, t_end - tile0));
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
        mbar_wait(&sm.full[slot], round & 1);
        const BatchSlot<C>& src = sm.ring[slot];
#pragma unroll
        for (int s = 0; s < C::kStepsPerWarp; ++s) {
          const int step = s * kConsumerWarps + warp;
          const int kl = step * kStepK + 8 * t;                // k within the chunk
          const bool ok = k_begin + i * kChunkK + kl < k_end;  // past the range: stale data
          uint4 xv[kNTiles];                                   // token j * 8 + g's fragment
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
            const int tok = j * 8 + g;
            xv[j] =
                ok && tok < p.n_tokens ? *reinterpret_cast<const uint4*>(&src.x[tok][kl]) : zero;
          }
#pragma unroll
          for (int r = 0; r < kRowTiles; ++r) {
            if (r >= mt) break;
            const uint4 pa = ok ? *reinterpret_cast<const uint4*>(&src.w[r * kRows + g][kl]) : zero;
            const uint4 pb =
                ok ? *reinterpret_cast<const uint4*>(&src.w[r * kRows + g + 8][kl]) : zero;
            // Every token tile's first mma, then every second one: each output still adds the
            // step's two halves in order, and no mma waits on the one just before it.
#pragma unroll
            for (int j = 0; j < kNTiles; ++j) {
              mma_bf16(c[r][j], pa.x, pb.x, pa.y, pb.y, xv[j].x, xv[j].y);
            }
#pragma unroll
            for (int j = 0; j < kNTiles; ++j) {
              mma_bf16(c[r][j], pa.z, pb.z, pa.w, pb.w, xv[j].z, xv[j].w);
            }
          }
        }
        cuda::release_slot(&sm.empty[slot], lane);
      }
      // The masked steps of production's last 1024-k chunk (linear_persistent_cuda.cu).
      const int64_t end = linear_masked_end(len);
      for (int64_t k = count * kChunkK + warp * kStepK; k < end; k += kConsumerWarps * kStepK) {
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r) {
          if (r >= mt) break;
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
            mma_bf16(c[r][j], 0u, 0u, 0u, 0u, 0u, 0u);
            mma_bf16(c[r][j], 0u, 0u, 0u, 0u, 0u, 0u);
          }
        }
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

template <class C, class Store>
const std::array<int64_t, 4>& batch_resident() {
  static const std::array<int64_t, 4> n = [] {
    const int smem = static_cast<int>(sizeof(BatchSmem<C>));
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(linear_batch_kernel<C, Store>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return measure_resident_clusters(linear_batch_kernel<C, Store>, smem);
  }();
  return n;
}

template <class C, class Store>
bool launch_batch_cfg(const LinearShape& s, cudaStream_t stream) {
  static_assert(sizeof(BatchSmem<C>) <= 227 * 1024, "shared memory of one block on sm_90");
  if (s.n > C::kXRows) return false;
  const int64_t tiles = (s.out_f + kRows - 1) / kRows;
  const LinearPlan plan =
      plan_linear(tiles, s.in, kLinearPlanChunkK, linear_plan_resident(), cuda::sm_count());
  int e = 0;
  while ((1 << e) < plan.splits) ++e;
  const int64_t clusters = std::min(tiles, batch_resident<C, Store>()[static_cast<size_t>(e)]);
  if (clusters < 1) return false;
  BatchParams bp{};
  bp.p = decode_params(s, plan, clusters);
  if (!linear_encode_rows(&bp.w_super, s.w, s.out_f, s.in, s.in, C::kChunkK, C::kWRows) ||
      !linear_encode_rows(&bp.w_tile, s.w, s.out_f, s.in, s.in, C::kChunkK, kRows) ||
      !linear_encode_rows(&bp.x, s.x, s.n, s.in, s.x_stride, C::kChunkK, C::kXRows)) {
    return false;
  }
  cuda::launch_pdl_cluster(linear_batch_kernel<C, Store>,
                           static_cast<unsigned>(clusters * plan.splits), kThreads,
                           static_cast<unsigned>(plan.splits), sizeof(BatchSmem<C>), stream, bp);
  return true;
}

// The configuration by token count. Shared memory: 4 tiles (64 rows x 512 bytes, 32 KB of weights
// a slot) with 5 slots and 4 sum buffers up to 8 tokens, 4 slots and 4 buffers at 16, 3 slots and
// 2 buffers at 32; 2 tiles with 3 slots and one buffer at 64. A super-tile ends its row tiles at
// once, and with fewer buffers than row tiles the consumers wait there for the finisher (ncu, 8 and
// 32 rows on gate|up with 2 and 1 buffers and 5 and 4 slots: ~21% of their samples; docs/cuda.md
// known gap 6). Measured and dropped: 8 tiles (4 at 64 tokens), whose accumulators spill: up to
// 32% slower at 32 and 64 rows, and no faster below.
template <class Store>
bool launch_batch(const LinearShape& s, cudaStream_t stream) {
  if (s.n <= 8) return launch_batch_cfg<BatchCfg<1, 4, 5, 4>, Store>(s, stream);
  if (s.n <= 16) return launch_batch_cfg<BatchCfg<2, 4, 4, 4>, Store>(s, stream);
  if (s.n <= 32) return launch_batch_cfg<BatchCfg<4, 4, 3, 2>, Store>(s, stream);
  return launch_batch_cfg<BatchCfg<8, 2, 3, 1>, Store>(s, stream);
}

}  // namespace

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

bool linear_decode_batch(const LinearShape& s, bool f32_out, cudaStream_t stream) {
  if (!s.vec_ok || s.n < 1 || s.n > kBatchMaxTokens) return false;
  if (s.epilogue == LinearEpilogue::kSwiGluPairs) return launch_batch<StoreSwiGluPairs>(s, stream);
  if (s.epilogue == LinearEpilogue::kAddToOut) return launch_batch<StoreAddY>(s, stream);
  return f32_out ? launch_batch<StoreY<float>>(s, stream)
                 : launch_batch<StoreY<__nv_bfloat16>>(s, stream);
}

}  // namespace tandem::kernels
