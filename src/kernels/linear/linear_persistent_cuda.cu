// Decode/verify linear (production: up to 3 rows, and 4 of matrices with few row tiles; else the
// wgmma kernel linear_wgmma_cuda.cu, with the same bits: linear_decode_takes_wgmma; the wide
// configuration, 17..32 rows, is a bench variant): one persistent launch
// per call that streams every weight tile through a shared-memory ring filled by the bulk-copy
// engine, so that no SM idles in a wave tail and no block pays a ramp of its own.
//
// Work split, fixed by the weight shape and the GPU (SM count, occupancy), never by n_tokens:
//  - the weights are 16-row tiles; each tile's k range is cut into `splits` (1, 2, 4 or 8) ranges
//    (multiples of 64 k), one per block of a thread-block cluster; one block per SM, so the plan
//    balances blocks (plan_linear, linear_plan.h), not waves. Every configuration below runs the
//    plan of the 1..4-token one (PlanCfg), whatever its own chunk, ring and occupancy;
//  - cluster c takes tiles c, c + clusters, ...; each block streams its range of each of its
//    tiles as 16-row chunks of kChunkK (1024 in production: one 2 KB bulk copy per row, and one
//    per token, since the copy engine's per-copy cost, not DRAM, limited 512-byte copies);
//  - the ring has 5 slots for up to 4 tokens (each slot: the 16 weight rows and 4 token rows of
//    the chunk), 4 slots of 8 token rows up to 8 tokens, 2 of 16 up to 16, 2 of 32 up to 32 (the
//    wide configuration: one pass over the weights for a batch of 32 decode rows); more slots are
//    more weight bytes in flight per SM, which is what the decode step's bandwidth follows;
//  - a producer warp keeps the ring full (it runs ahead across tiles while the consumers reduce),
//    and starts on the weights before the previous kernel has finished (programmatic dependent
//    launch; the tokens only after); 8 consumer warps feed mma.sync m16n8k16 (bf16 -> fp32) with
//    the weights as the A operand and up to 32 tokens as 1, 2 or 4 8-column B tiles;
//  - the decode order (linear_plan.h): in a chunk, warp c takes class c's piece, the 128 k from
//    128 c, as natural k16 steps (ldmatrix fragments) chained in its accumulators across chunks;
//    the 8 warp sums are added left to right; the ranks' range sums go to rank 0's shared memory
//    (DSMEM) and are added in rank order. No atomics, no workspace: a token's result depends only
//    on its inputs and the shape;
//  - the end of a tile (those additions, the exchange, input_rms and the store) runs in the tenth
//    warp while the consumers stream the next tile (the finisher form, linear_decode_common.cuh:
//    the consumers only post their sums); the wide configuration, with one sum buffer, ends tiles
//    in the consumers (finish_tile), in the same order of additions.
// Why every configuration computes the same bits: a token is its own mma B column, and an output's
// order of additions is fixed by the plan alone. A configuration with chunks shorter than 1024
// gives warp c its piece in the chunk that holds it (the other warps only release that slot), so
// each warp sees its class's k16 steps in the same order. Steps past the range are skipped, and a
// step's 8-k quarters past it read as zeros: a zero step would change no sum (a chain starts at +0
// and is never -0), which is also why the wgmma kernel (linear_wgmma_cuda.cu), whose stages past
// `in` read zeros, gives the same bits.
// Epilogues are store policies (StoreY, StoreSwiGluPairs, StoreAddY; linear_decode_common.cuh,
// shared with the wgmma and FP8 kernels, as is the end of a tile) of one kernel body: an epilogue
// costs the plain linear nothing, and its sums are the plain linear's, bit for bit.
// LinearArgs::input_rms (an RMSNorm folded into the weights): in rank 0 of each cluster, the one
// that stores, the tenth warp sums each token's squares first (lane l: 8-element groups l,
// l + 32, ... in order, then the lanes' butterfly) while the consumers stream, so that the norm
// costs no launch of its own, no pass over the weights and no consumer time; the sums are scaled by
// the inverse RMS before the store's rounding. kAddToOut's old out values are loaded before the
// tile's sums are in, so that the read-modify-write adds no memory latency to the store.
#include <algorithm>
#include <array>

#include "kernels/linear/linear_decode_common.cuh"
#include "kernels/linear/linear_plan.h"

namespace tandem::kernels {

namespace {

using namespace decode_linear;  // NOLINT: the shared pieces of both decode kernels
using cuda::mbar_wait;

// A kernel configuration: B tiles (8 tokens each), k per chunk, ring slots per block, token rows
// per slot (at most 8 per B tile; fewer leave room for more slots, for calls of that many tokens
// only), and tile-sum buffers (2: by tile parity, so that the warps and ranks run a tile apart; 1
// leaves the wide configuration room for a second 1024-k slot).
template <int kNTiles_, int kChunkK_, int kStages_, int kXRows_ = 8 * kNTiles_, int kSumBufs_ = 2>
struct Cfg {
  static constexpr int kNTiles = kNTiles_, kChunkK = kChunkK_, kStages = kStages_;
  static constexpr int kXRows = kXRows_, kSumBufs = kSumBufs_;
  static constexpr int kRmsLoads = kNTiles == 4 ? 32 : 16;  // sum_squares' loads in flight
  // 2K + 16 bytes = 16 mod 128: the 8 rows of an ldmatrix phase fall in 8 different bank quads.
  static constexpr int kRowPitch = kChunkK + 8;
  static_assert(kChunkK % kPieceK == 0 && kLinearPlanChunkK % kChunkK == 0,
                "a chunk holds whole pieces and tiles the plan's chunks");
  static_assert(kXRows <= 8 * kNTiles && kXRows <= 32, "one producer lane per token row");
  static_assert(kSumBufs == 1 || kSumBufs == 2);
};

// The configuration whose plan every configuration runs: production's for 1..4 tokens.
using PlanCfg = Cfg<1, kLinearPlanChunkK, 5, 4>;

// One ring slot: a 16-row x kChunkK weight chunk and the same k of every token (copied with it,
// so that the consumers never wait on global memory).
template <class C>
struct Slot {
  __nv_bfloat16 w[kRows][C::kRowPitch];
  __nv_bfloat16 x[C::kXRows][C::kRowPitch];
};

// Two sum buffers: the finisher form (the rms warp ends the tiles, part[] holds all 8 warps'
// sums); one (the wide configuration, whose ~226 KB leave no room for an eighth part): the
// consumer warps end them (finish_tile).
template <class C>
constexpr bool kFinisherForm = C::kSumBufs == 2;

template <class C>
using Smem = RingSmem<Slot<C>, C::kStages, C::kSumBufs, C::kNTiles,
                      kFinisherForm<C> ? kConsumerWarps : kConsumerWarps - 1>;

// One warp's piece of a slot (the decode order, linear_plan.h): the k16 steps of
// [kl0, kl0 + kPieceK) in increasing k, 32 k at a time, the fragments of natural k sets by
// ldmatrix (weights as A: rows g and g + 8; each token its own B column). Products at k >= rem
// (past the range) are zeros: a step that starts past it is skipped, which changes no sum (a class
// sum starts at +0 and so is never -0), and its 8-k quarters past it read as zeros.
template <class C>
__device__ __forceinline__ void consume_piece(const Slot<C>& src, float (&c)[C::kNTiles][4],
                                              int kl0, int64_t rem, int lane) {
  const int arow = (lane & 7) + ((lane >> 3) & 1) * 8, acol = (lane >> 4) * 8;
  const int brow = lane & 7, bcol = (lane >> 3) * 8;
#pragma unroll
  for (int s = 0; s < static_cast<int>(kPieceK) / 32; ++s) {
    const int kl = kl0 + 32 * s;
    if (kl >= rem) break;
    const bool whole = kl + 32 <= rem;
    uint32_t a0[4], a1[4];
    ldmatrix_x4(a0, &src.w[arow][kl + acol]);
    ldmatrix_x4(a1, &src.w[arow][kl + 16 + acol]);
    if (!whole) {
      if (kl + 8 >= rem) a0[2] = a0[3] = 0u;
      if (kl + 24 >= rem) a1[2] = a1[3] = 0u;
    }
#pragma unroll
    for (int j = 0; j < C::kNTiles; ++j) {
      // Token rows past kXRows (PlanCfg's 4) repeat the last: columns no store reads.
      uint32_t b[4];
      ldmatrix_x4(b, &src.x[min(j * 8 + brow, C::kXRows - 1)][kl + bcol]);
      if (!whole) {
        if (kl + 8 >= rem) b[1] = 0u;
        if (kl + 24 >= rem) b[3] = 0u;
      }
      mma_bf16(c[j], a0[0], a0[1], a0[2], a0[3], b[0], b[1]);
      if (whole || kl + 16 < rem) mma_bf16(c[j], a1[0], a1[1], a1[2], a1[3], b[2], b[3]);
    }
  }
}

template <class C, class Store>
__global__ void __launch_bounds__(kThreads, 1) linear_persistent_kernel(const Params p) {
  constexpr int kNTiles = C::kNTiles, kChunkK = C::kChunkK;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<Smem<C>*>(smem_raw);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int splits = p.splits;
  const auto [rank, cluster_id, k_begin, k_end, len] = block_range(p);
  const int64_t count = (len + kChunkK - 1) / kChunkK;

  // Before any remote arrival or inbox write the other ranks' barriers must be initialised too:
  // every thread arrives at the cluster barrier now and waits for it later, the consumers and the
  // rms warp when they start, the producer only after its first weight copies, which use this
  // block's barriers alone.
  init_barriers<C::kStages, C::kSumBufs>(sm, splits);

  // input_rms is needed by the block that stores: rank 0, when its cluster has a tile.
  const bool stores = rank == 0 && cluster_id < p.tiles;
  if (warp == kRmsWarp) {
    if constexpr (kFinisherForm<C>) {
      finisher_warp<kNTiles, C::kSumBufs, C::kRmsLoads, Store>(p, sm, lane, rank, cluster_id,
                                                               stores);
    } else {
      rms_warp<C::kRmsLoads>(p, sm, lane, stores);
    }
  } else if (warp == kProducerWarp) {
    // Producer: fill slot after slot, waiting only for the consumers to free it. Lanes 0-15 copy
    // the weight rows (past out_f: the last row again), lane t token t.
    constexpr uint32_t kSlots = C::kStages;
    const int n_x = min(p.n_tokens, C::kXRows);
    const uint32_t copies = kRows + static_cast<uint32_t>(n_x);
    auto bytes_of = [&](int64_t i) {
      return static_cast<uint32_t>(min(int64_t{kChunkK}, k_end - (k_begin + i * kChunkK)) * 2);
    };
    auto issue_w = [&](int64_t tile, int64_t i, uint32_t slot) {  // expects the tokens too
      if (lane == 0) cuda::mbar_arrive_expect_tx(&sm.full[slot], bytes_of(i) * copies);
      __syncwarp();
      const int64_t row = min(tile * kRows + lane, p.out_f - 1);
      if (lane < kRows) {
        cuda::bulk_copy(&sm.ring[slot].w[lane][0], p.w + row * p.in + k_begin + i * kChunkK,
                        bytes_of(i), &sm.full[slot]);
      }
    };
    auto issue_x = [&](int64_t i, uint32_t slot) {
      if (lane < n_x) {
        cuda::bulk_copy(&sm.ring[slot].x[lane][0], p.x + lane * p.x_stride + k_begin + i * kChunkK,
                        bytes_of(i), &sm.full[slot]);
      }
    };
    produce_tiles<kSlots>(p, sm, cluster_id, count, issue_w, issue_x);
  } else {
    cluster_wait(splits);
    // finish_tile writes `out`, which the previous kernel may still read; in the finisher form
    // the wait stays too (every kernel waits before it triggers its dependents).
    cuda::pdl_begin();
    const int g = lane >> 2, t = lane & 3;
    float scale[kNTiles][2] = {};  // input_rms, finish_tile: warp 0's tokens' inverse RMS
    uint32_t it = 0, use = 0;
    for (int64_t tile = cluster_id; tile < p.tiles; tile += p.clusters, ++use) {
      float c[kNTiles][4], prev[kNTiles][4];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) c[j][q] = prev[j][q] = 0.f;
      }
      if constexpr (Store::kReadsOut && !kFinisherForm<C>) {
        if (warp == 0 && stores) Store::load_prev(p, tile, g, t, prev);  // lands while streaming
      }
      for (int64_t i = 0; i < count; ++i, ++it) {
        const uint32_t slot = it % C::kStages, round = it / C::kStages;
        mbar_wait(&sm.full[slot], round & 1);
        // This warp's piece of the plan's 1024-k chunk that holds this chunk: its k within the
        // chunk (kl0), or none when the piece lies in another of the plan chunk's pieces.
        const int64_t chunk0 = i * kChunkK;
        const int64_t kl0 =
            chunk0 / kLinearPlanChunkK * kLinearPlanChunkK + warp * kPieceK - chunk0;
        if (kl0 >= 0 && kl0 < kChunkK) {
          consume_piece<C>(sm.ring[slot], c, static_cast<int>(kl0), k_end - (k_begin + chunk0),
                           lane);
        }
        cuda::release_slot(&sm.empty[slot], lane);
      }
      if constexpr (kFinisherForm<C>) {
        post_tile_sums<kNTiles>(sm, c, use, warp, lane);
      } else {
        finish_tile<kNTiles, C::kSumBufs, Store>(p, sm, c, prev, scale, tile, use,
                                                 tile + p.clusters < p.tiles, warp, lane, rank);
      }
    }
    if constexpr (!kFinisherForm<C>) finish_exit<C::kSumBufs>(sm, use, warp, rank);
  }
}

// Lets an instantiation use its shared memory (once).
template <class C, class Store>
void allow_smem() {
  static const bool done = [] {
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(linear_persistent_kernel<C, Store>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(sizeof(Smem<C>))));
    return true;
  }();
  (void)done;
}

// How many clusters of each size (1, 2, 4, 8 blocks) fit on the GPU at once: a property of the
// kernel and the GPU, measured once per instantiation.
template <class C, class Store>
const std::array<int64_t, 4>& resident_clusters() {
  static const std::array<int64_t, 4> n = [] {
    allow_smem<C, Store>();
    return measure_resident_clusters(linear_persistent_kernel<C, Store>,
                                     static_cast<int>(sizeof(Smem<C>)));
  }();
  return n;
}

// The plan of every configuration and epilogue: PlanCfg's, from its own resident clusters and
// kLinearPlanChunkK, so that a token's bits do not depend on which configuration its call's token
// count picks. (Each configuration used to plan from its own occupancy and chunk: the three
// production ones agreed, all 1024-k chunks at one block per SM, which fixes the cluster
// occupancy; bench configurations 2 and 3 did not.) A configuration that fits fewer clusters at
// once than the plan launches is still correct (no cluster waits for another), only slower; none
// does, since every one fits at least one block per SM (the wide one, ~226 KB, too).

template <class C, class Store>
void launch_cfg(const LinearShape& s, cudaStream_t stream) {
  static_assert(sizeof(Smem<C>) <= 227 * 1024, "shared memory of one block on sm_90");
  TANDEM_CHECK(s.n <= C::kXRows, "linear_skinny_persistent: {} tokens for {} token rows", s.n,
               C::kXRows);
  allow_smem<C, Store>();
  const int64_t tiles = (s.out_f + kRows - 1) / kRows;
  const LinearPlan plan = plan_linear(tiles, s.in, kLinearPlanChunkK, linear_plan_resident(),
                                      cuda::sm_count(), kLinearRangeAlign);
  const Params p = decode_params(s, plan, plan.clusters);
  cuda::launch_pdl_cluster(linear_persistent_kernel<C, Store>,
                           static_cast<unsigned>(plan.clusters * plan.splits), kThreads,
                           static_cast<unsigned>(plan.splits), sizeof(Smem<C>), stream, p);
}

// 17..32 tokens: 4 B tiles of 8 token rows, 48 rows of 2 KB per slot (~99 KB). Two 1024-k slots
// (64 KB of weights in flight per SM, as the 16-token ring; 2 KB copies, as production) fit only
// with one tile-sum buffer (part and inbox: 28 KB instead of 56): ~226 KB.
using Wide = Cfg<4, 1024, 2, 32, 1>;
// kLinearPersistentWide512, bench only: 512-k chunks, 3 slots, two sum buffers (~209 KB; 48 KB of
// weights).
using Wide512 = Cfg<4, 512, 3>;

// Configurations of one or two B tiles: k per chunk and ring depth (both share the choice).
template <int kNTiles, class Store>
void launch_narrow(const LinearShape& s, int config, cudaStream_t stream) {
  using EightRows = Cfg<kNTiles, 1024, kNTiles == 1 ? 4 : 2>;  // 8 token rows per B tile
  switch (config) {
    case 1:
      return launch_cfg<Cfg<kNTiles, 1024, kNTiles == 1 ? 3 : 2>, Store>(s, stream);
    case 2:
      return launch_cfg<Cfg<kNTiles, 512, 3>, Store>(s, stream);
    case 3:
      return launch_cfg<Cfg<kNTiles, 256, kNTiles == 1 ? 12 : 9>, Store>(s, stream);
    case 4:  // the production ring before a950b97: EightRows at every n
      return launch_cfg<EightRows, Store>(s, stream);
    default:
      // Up to 4 tokens (decode, verify with k <= 3): 4 token rows per slot instead of 8 leave
      // room for a fifth 1024-k slot (~220 KB), 25% more weight bytes in flight per SM.
      if (s.n <= 4) return launch_cfg<PlanCfg, Store>(s, stream);
      return launch_cfg<EightRows, Store>(s, stream);
  }
}

// 17..32 tokens.
template <class Store>
void launch_wide(const LinearShape& s, int config, cudaStream_t stream) {
  if (config == kLinearPersistentWide512) return launch_cfg<Wide512, Store>(s, stream);
  launch_cfg<Wide, Store>(s, stream);
}

template <class Store>
void launch_n(const LinearShape& s, int config, cudaStream_t stream) {
  if (s.n <= 8) return launch_narrow<1, Store>(s, config, stream);
  if (s.n <= kSkinnyMaxTokens) return launch_narrow<2, Store>(s, config, stream);
  launch_wide<Store>(s, config, stream);
}

}  // namespace

const std::array<int64_t, 4>& linear_plan_resident() {
  return resident_clusters<PlanCfg, StoreY<__nv_bfloat16>>();
}

void linear_skinny_persistent(const LinearShape& s, bool f32_out, int config, cudaStream_t stream) {
  TANDEM_CHECK(s.epilogue == LinearEpilogue::kNone ||
                   (!f32_out && (s.epilogue == LinearEpilogue::kAddToOut || s.out_f % kRows == 0)),
               "linear_skinny_persistent: the epilogues need bf16 out, and swiglu a multiple of {} "
               "rows, got out_f {}",
               kRows, s.out_f);
  TANDEM_CHECK(s.n >= 1 && s.n <= kWgmmaMaxTokens,
               "linear_skinny_persistent: {} tokens (1 to {} per call)", s.n, kWgmmaMaxTokens);
  const bool older_wide = config == kLinearPersistentWide512 || config == kLinearPersistentWide;
  if (linear_decode_takes_wgmma(s.n, s.out_f, cuda::sm_count()) && !older_wide &&
      linear_decode_wgmma(s, f32_out, stream)) {
    return;
  }
  if (s.n > kWideMaxTokens) {  // the wide configuration's groups of 32 (same bits)
    for (int64_t r0 = 0; r0 < s.n; r0 += kWideMaxTokens) {
      LinearShape part = s;
      part.n = std::min(kWideMaxTokens, s.n - r0);
      part.x = static_cast<const __nv_bfloat16*>(s.x) + r0 * s.x_stride;
      const int64_t out_elem = f32_out ? 4 : 2;
      part.out = static_cast<char*>(s.out) + r0 * s.out_stride * out_elem;
      linear_skinny_persistent(part, f32_out, older_wide ? config : kLinearPersistentWide, stream);
    }
    return;
  }
  if (s.epilogue == LinearEpilogue::kSwiGluPairs) {
    return launch_n<StoreSwiGluPairs>(s, config, stream);
  }
  if (s.epilogue == LinearEpilogue::kAddToOut) return launch_n<StoreAddY>(s, config, stream);
  f32_out ? launch_n<StoreY<float>>(s, config, stream)
          : launch_n<StoreY<__nv_bfloat16>>(s, config, stream);
}

}  // namespace tandem::kernels
