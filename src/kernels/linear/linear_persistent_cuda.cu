// Decode/verify linear (n_tokens <= 32): one persistent launch per call that streams every weight
// tile through a shared-memory ring filled by the bulk-copy engine, so that no SM idles in a wave
// tail and no block pays a ramp of its own.
//
// Work split, fixed by the weight shape and the GPU (SM count, occupancy), never by n_tokens:
//  - the weights are 16-row tiles; each tile's k range is cut into `splits` (1, 2, 4 or 8) ranges
//    (multiples of 8 k), one per block of a thread-block cluster; one block per SM, so the plan
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
//  - in a chunk, warp w takes k-steps w, w + 8, ...; the 8 warp sums are added as
//    ((w0 + w1) + (w2 + w3)) + ((w4 + w5) + (w6 + w7)); the ranks' range sums go to rank 0's
//    shared memory (DSMEM) and are added in rank order. No atomics, no workspace: a token's result
//    depends only on its inputs and the shape.
// Why every configuration computes the same bits: a token is its own mma B column, and an output's
// order of additions is fixed by the plan alone. Warp w accumulates the k-steps of its class
// (index mod 8, since a chunk is a multiple of 8 steps) in increasing order across chunks, and a
// chunk shorter than 1024 runs, after a range's last chunk, the masked steps production's 1024-k
// chunk would have run (linear_masked_end), so even zero products land in the same place.
// Within a k-step, lane (g, t) reads 8 consecutive k of rows g and g + 8 and of token g; the mma's
// k index is a permutation of the true k, identical for A and B.
// Epilogues are store policies (StoreY, StoreSwiGluPairs, StoreAddY) of one kernel body: an
// epilogue costs the plain linear nothing, and its sums are the plain linear's, bit for bit.
// LinearArgs::input_rms (an RMSNorm folded into the weights): in rank 0 of each cluster, the one
// that stores, a tenth warp sums each token's squares (lane l: 8-element groups l, l + 32, ... in
// order, then the lanes' butterfly) while the consumers stream, so that the norm costs no launch
// of its own, no pass over the weights and no consumer time; warp 0 scales its sums by the inverse
// RMS before the store's rounding. kAddToOut's old out values are loaded when a tile starts, so
// that the read-modify-write adds no memory latency to the store.
#include <cooperative_groups.h>

#include <algorithm>
#include <array>

#include "kernels/bulk_copy.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/linear/linear_cuda.cuh"
#include "kernels/linear/linear_plan.h"
#include "kernels/swiglu/swiglu.h"
#include "kernels/swiglu/swiglu_cuda.cuh"

namespace tandem::kernels {

namespace {

namespace cg = cooperative_groups;
using cuda::mbar_wait;

constexpr int kConsumerWarps = 8;  // one k-step of each chunk per warp
constexpr int kProducerWarp = kConsumerWarps;
constexpr int kRmsWarp = kConsumerWarps + 1;         // input_rms: the sums of squares
constexpr int kThreads = (kConsumerWarps + 2) * 32;  // + the producer and the rms warp
constexpr uint32_t kSumBarrier = 1;                  // consumer warps: part[] is written (256)
constexpr uint32_t kRmsBarrier = 2;                  // rms warp -> warp 0 (64 threads)
constexpr uint32_t kPartBarrier = 3;  // one sum buffer: warp 0 has read part[] (256 threads)
constexpr int kRows = 16;
constexpr int kMaxSplits = 8;  // portable cluster size

// A kernel configuration: B tiles (8 tokens each), k per chunk, ring slots per block, token rows
// per slot (at most 8 per B tile; fewer leave room for more slots, for calls of that many tokens
// only), and tile-sum buffers (2: by tile parity, so that the warps and ranks run a tile apart; 1
// leaves the wide configuration room for a second 1024-k slot).
template <int kNTiles_, int kChunkK_, int kStages_, int kXRows_ = 8 * kNTiles_, int kSumBufs_ = 2>
struct Cfg {
  static constexpr int kNTiles = kNTiles_, kChunkK = kChunkK_, kStages = kStages_;
  static constexpr int kXRows = kXRows_, kSumBufs = kSumBufs_;
  static constexpr int kRmsLoads = kNTiles == 4 ? 32 : 16;  // sum_squares' loads in flight
  static constexpr int kRowPitch = kChunkK + 32;  // 2K + 64 bytes = 64 mod 128: no bank conflicts
  static constexpr int kStepsPerWarp = kChunkK / 32 / kConsumerWarps;  // warp w: steps w, w + 8..
  static_assert(kStepsPerWarp >= 1 && kChunkK % (32 * kConsumerWarps) == 0);
  static_assert(kLinearPlanChunkK % kChunkK == 0, "chunks tile the plan's chunks (masked steps)");
  static_assert(kXRows <= 8 * kNTiles && kXRows <= 32, "one producer lane per token row");
  static_assert(kSumBufs == 1 || kSumBufs == 2);
};

// The configuration whose plan every configuration runs: production's for 1..4 tokens.
using PlanCfg = Cfg<1, kLinearPlanChunkK, 5, 4>;

// One tile's sums in the mma C layout: v[j][q][lane] is row g (+8 if q >= 2), token
// 8j + 2t + (q & 1).
template <int kNTiles>
struct TileSums {
  float v[kNTiles][4][32];
};

// One ring slot: a 16-row x kChunkK weight chunk and the same k of every token (copied with it,
// so that the consumers never wait on global memory).
template <class C>
struct Slot {
  __nv_bfloat16 w[kRows][C::kRowPitch];
  __nv_bfloat16 x[C::kXRows][C::kRowPitch];
};

// Tile u uses sum buffer u % kSumBufs (its round: u / kSumBufs, the parity of its phases).
template <class C>
struct Smem {
  static constexpr int kBufs = C::kSumBufs;
  Slot<C> ring[C::kStages];
  uint64_t full[C::kStages];   // chunk landed (bulk-copy bytes)
  uint64_t empty[C::kStages];  // every consumer warp is done with the slot
  uint64_t ready[kBufs];       // rank 0: the other ranks' sums of a tile are in
  uint64_t freed[kBufs];       // rank > 0: rank 0 has read this rank's inbox slot
  TileSums<C::kNTiles> part[kBufs][kConsumerWarps - 1];  // warps 1..7's sums (warp 0 keeps its own)
  TileSums<C::kNTiles> inbox[kBufs][kMaxSplits - 1];     // rank 0: ranks 1..7's range sums
  float sumsq[8 * C::kNTiles];  // rank 0, input_rms: each token's sum of squares
};

struct Params {
  const __nv_bfloat16* x;
  const __nv_bfloat16* w;
  void* out;
  int64_t x_stride, out_stride, in, out_f;
  int64_t tiles, clusters, range_k;  // range_k: k per rank (a multiple of 8)
  int splits, n_tokens;
  bool input_rms;
  float input_rms_eps;
};

// Store policies: how warp 0 of rank 0 writes a tile's finished sums. In the mma C layout lane
// (g, t) holds c[j][0..1] = rows g and c[j][2..3] = rows g + 8 of the tile, for tokens
// 8j + 2t + (0, 1). for_each_out calls fn(j, q, offset in out) for those inside out_f x n_tokens.
template <int kNTiles, class Fn>
__device__ __forceinline__ void for_each_out(const Params& p, int64_t tile, int g, int t, Fn&& fn) {
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t row = tile * kRows + g + (q >= 2 ? 8 : 0);  // c0,c1: row g; c2,c3: g + 8
      const int tok = j * 8 + 2 * t + (q & 1);                  // c0,c2: column 2t; c1,c3: 2t + 1
      if (row < p.out_f && tok < p.n_tokens) fn(j, q, tok * p.out_stride + row);
    }
  }
}

template <typename TOut>
struct StoreY {  // LinearEpilogue::kNone: out = y
  static constexpr bool kReadsOut = false;
  template <int kNTiles>
  __device__ static void store(const Params& p, int64_t tile, int g, int t,
                               const float (&c)[kNTiles][4], const float (&)[kNTiles][4]) {
    auto* out = static_cast<TOut*>(p.out);
    for_each_out<kNTiles>(p, tile, g, t, [&](int j, int q, int64_t at) {
      out[at] = cuda::from_float<TOut>(c[j][q]);
    });
  }
};

// LinearEpilogue::kSwiGluPairs (bf16 out, out_f a multiple of 16): a tile is one gate|up group of
// the pair layout, so rows g and g + 8 are the gate and the up of output column 8 tile + g. Each is
// rounded to bf16 as StoreY would store it, then combined by swiglu_cuda's own formula.
struct StoreSwiGluPairs {
  static_assert(2 * kSwigluPairGroup == kRows, "a 16-row tile is one gate|up group");
  static constexpr bool kReadsOut = false;
  template <int kNTiles>
  __device__ static void store(const Params& p, int64_t tile, int g, int t,
                               const float (&c)[kNTiles][4], const float (&)[kNTiles][4]) {
    auto* out = static_cast<__nv_bfloat16*>(p.out);
    const int64_t col = tile * kSwigluPairGroup + g;
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int tok = j * 8 + 2 * t + q;
        if (tok < p.n_tokens) {
          out[tok * p.out_stride + col] =
              cuda::swiglu_bf16(__float2bfloat16_rn(c[j][q]), __float2bfloat16_rn(c[j][q + 2]));
        }
      }
    }
  }
};

// LinearEpilogue::kAddToOut (bf16 out): out = round(out + round(y)), the residual add of rms_norm;
// `prev` holds the tile's out values, loaded by load_prev when the tile started.
struct StoreAddY {
  static constexpr bool kReadsOut = true;
  template <int kNTiles>
  __device__ static void load_prev(const Params& p, int64_t tile, int g, int t,
                                   float (&prev)[kNTiles][4]) {
    const auto* out = static_cast<const __nv_bfloat16*>(p.out);
    for_each_out<kNTiles>(p, tile, g, t, [&](int j, int q, int64_t at) {
      prev[j][q] = __bfloat162float(__ldcg(out + at));
    });
  }
  template <int kNTiles>
  __device__ static void store(const Params& p, int64_t tile, int g, int t,
                               const float (&c)[kNTiles][4], const float (&prev)[kNTiles][4]) {
    auto* out = static_cast<__nv_bfloat16*>(p.out);
    for_each_out<kNTiles>(p, tile, g, t, [&](int j, int q, int64_t at) {
      out[at] = __float2bfloat16_rn(prev[j][q] + __bfloat162float(__float2bfloat16_rn(c[j][q])));
    });
  }
};

// input_rms, in the rms warp of a storing block: each token's sum of squares of x, lane l taking
// the 8-element groups l, l + 32, ... in order, then the lanes' butterfly. A function of the
// token's row alone. Tokens go in blocks of up to kLoads / 4 whose loads are issued together,
// kLoads 16-byte loads in flight per lane (16 groups of one token, 8 of two, ...), so that the rms
// warp stays ahead of warp 0's first store: 16 loads (blocks of 4) for up to 16 tokens, where 4
// tokens of 5120 cost 5 memory round trips rather than 12; 32 (blocks of 8) in the wide
// configuration, 20 round trips for 32 tokens instead of 40. The additions keep each token's group
// order whatever the batching (the groups past the row, zeros, add +0 to a sum that is >= +0).
template <int kLoads, int kNT>
__device__ __forceinline__ void sum_squares_block(const Params& p, int lane, int t0, float* sumsq) {
  constexpr int kPer = kLoads / kNT;   // groups per token per round
  constexpr int64_t kStride = 32 * 8;  // elements between a lane's groups
  float s[kNT] = {};
  for (int64_t i0 = static_cast<int64_t>(lane) * 8; i0 < p.in; i0 += kPer * kStride) {
    uint4 v[kNT][kPer];
#pragma unroll
    for (int t = 0; t < kNT; ++t) {  // every load first
      const __nv_bfloat16* row = p.x + (t0 + t) * p.x_stride;
#pragma unroll
      for (int b = 0; b < kPer; ++b) {  // past the row: zeros, which add nothing
        const int64_t i = i0 + b * kStride;
        v[t][b] =
            i < p.in ? __ldcg(reinterpret_cast<const uint4*>(row + i)) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int t = 0; t < kNT; ++t) {
#pragma unroll
      for (int b = 0; b < kPer; ++b) {
        const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&v[t][b]);
#pragma unroll
        for (int k = 0; k < 8; ++k) s[t] += __bfloat162float(e[k]) * __bfloat162float(e[k]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kNT; ++t) {
    const float total = cuda::warp_sum(s[t]);
    if (lane == 0) sumsq[t0 + t] = total;
  }
}

// A block of nt <= kNT tokens from t0.
template <int kLoads, int kNT>
__device__ __forceinline__ void sum_squares_upto(const Params& p, int lane, int t0, int nt,
                                                 float* sumsq) {
  if constexpr (kNT > 1) {
    if (nt < kNT) return sum_squares_upto<kLoads, kNT - 1>(p, lane, t0, nt, sumsq);
  }
  sum_squares_block<kLoads, kNT>(p, lane, t0, sumsq);
}

template <int kLoads>
__device__ __forceinline__ void sum_squares(const Params& p, int lane, float* sumsq) {
  constexpr int kBlock = kLoads / 4;
  for (int t0 = 0; t0 < p.n_tokens; t0 += kBlock) {
    sum_squares_upto<kLoads, kBlock>(p, lane, t0, min(kBlock, p.n_tokens - t0), sumsq);
  }
}

template <class C, class Store>
__global__ void __launch_bounds__(kThreads, 1) linear_persistent_kernel(const Params p) {
  constexpr int kNTiles = C::kNTiles, kChunkK = C::kChunkK;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<Smem<C>*>(smem_raw);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int splits = p.splits;
  const int rank = static_cast<int>(blockIdx.x) % splits;
  const int64_t cluster_id = blockIdx.x / splits;
  // This rank's k range [k_begin, k_end), streamed as chunks of kChunkK (the last one shorter).
  const int64_t k_begin = rank * p.range_k;
  const int64_t k_end = min(p.in, k_begin + p.range_k);
  const int64_t len = max(k_end - k_begin, int64_t{0});
  const int64_t count = (len + kChunkK - 1) / kChunkK;

  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      cuda::mbar_init(&sm.full[s], 1);
      cuda::mbar_init(&sm.empty[s], kConsumerWarps);
    }
    for (int b = 0; b < C::kSumBufs; ++b) {
      cuda::mbar_init(&sm.ready[b], 32 * (splits - 1));  // every lane of warp 0 of each rank > 0
      cuda::mbar_init(&sm.freed[b], 32);                 // every lane of rank 0's warp 0
    }
    cuda::fence_mbar_init();
  }
  __syncthreads();  // this block's barriers are initialised
  // Before any remote arrival or inbox write the other ranks' barriers must be initialised too:
  // every thread arrives at the cluster barrier now and waits for it later, the consumers and the
  // rms warp when they start, the producer only after its first weight copies, which use this
  // block's barriers alone.
  if (splits > 1) cg::this_cluster().barrier_arrive();
  const auto cluster_wait = [&] {
    if (splits > 1) cg::this_cluster().barrier_wait();
  };

  // input_rms is needed by the block that stores: rank 0, when its cluster has a tile.
  const bool stores = rank == 0 && cluster_id < p.tiles;
  if (warp == kRmsWarp) {
    cluster_wait();
    if (p.input_rms && stores) {
      cuda::pdl_begin();  // x is the previous kernel's output
      sum_squares<C::kRmsLoads>(p, lane, sm.sumsq);
      cuda::named_barrier_arrive(kRmsBarrier, 64);  // warp 0 waits before its first store
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
    // The first tile's first slots of weights go out before the previous kernel has finished
    // (programmatic dependent launch); the tokens, its output, only after.
    const int64_t first = cluster_id;
    const int64_t pre = first < p.tiles ? min(count, static_cast<int64_t>(kSlots)) : 0;
    for (int64_t i = 0; i < pre; ++i) issue_w(first, i, static_cast<uint32_t>(i));
    cluster_wait();
    cuda::pdl_begin();
    for (int64_t i = 0; i < pre; ++i) issue_x(i, static_cast<uint32_t>(i));
    uint32_t it = static_cast<uint32_t>(pre);
    for (int64_t tile = first; tile < p.tiles; tile += p.clusters) {
      for (int64_t i = tile == first ? pre : 0; i < count; ++i, ++it) {
        const uint32_t slot = it % kSlots, round = it / kSlots;
        if (round > 0) mbar_wait(&sm.empty[slot], (round - 1) & 1);
        issue_w(tile, i, slot);
        issue_x(i, slot);
      }
    }
  } else {
    cluster_wait();
    cuda::pdl_begin();  // before writing `out`, which the previous kernel may still read
    const int g = lane >> 2, t = lane & 3;
    float scale[kNTiles][2] = {};  // input_rms: warp 0's tokens' inverse RMS
    const uint4 zero = make_uint4(0, 0, 0, 0);
    uint32_t it = 0, use = 0;
    for (int64_t tile = cluster_id; tile < p.tiles; tile += p.clusters, ++use) {
      float c[kNTiles][4], prev[kNTiles][4];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) c[j][q] = prev[j][q] = 0.f;
      }
      if constexpr (Store::kReadsOut) {
        if (warp == 0 && stores) Store::load_prev(p, tile, g, t, prev);  // lands while streaming
      }
      for (int64_t i = 0; i < count; ++i, ++it) {
        const uint32_t slot = it % C::kStages, round = it / C::kStages;
        mbar_wait(&sm.full[slot], round & 1);
        const Slot<C>& src = sm.ring[slot];
#pragma unroll
        for (int s = 0; s < C::kStepsPerWarp; ++s) {
          const int kl = (s * kConsumerWarps + warp) * 32 + 8 * t;  // k within the chunk
          const bool ok = k_begin + i * kChunkK + kl < k_end;       // past the range: stale data
          const uint4 pa = ok ? *reinterpret_cast<const uint4*>(&src.w[g][kl]) : zero;
          const uint4 pb = ok ? *reinterpret_cast<const uint4*>(&src.w[g + 8][kl]) : zero;
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
            const int tok = j * 8 + g;  // tokens past n_tokens are never copied: stale, unused
            const uint4 xv = ok && tok < p.n_tokens && tok < C::kXRows
                                 ? *reinterpret_cast<const uint4*>(&src.x[tok][kl])
                                 : zero;
            mma_bf16(c[j], pa.x, pb.x, pa.y, pb.y, xv.x, xv.y);
            mma_bf16(c[j], pa.z, pb.z, pa.w, pb.w, xv.z, xv.w);
          }
        }
        __syncwarp();  // every lane's reads of the slot are done (consumed by the mma)
        if (lane == 0) cuda::mbar_arrive(&sm.empty[slot]);
      }
      if constexpr (kChunkK < kLinearPlanChunkK) {
        // Production's last 1024-k chunk also runs this warp's steps up to linear_masked_end
        // with zero operands (the `ok` false branch above): run them here, after the last chunk,
        // as production does. A zero product changes nothing but the sign of a -0 sum; this
        // keeps even that.
        const int64_t end = linear_masked_end(len);
        for (int64_t k = count * kChunkK + warp * 32; k < end; k += kConsumerWarps * 32) {
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
            mma_bf16(c[j], 0u, 0u, 0u, 0u, 0u, 0u);
            mma_bf16(c[j], 0u, 0u, 0u, 0u, 0u, 0u);
          }
        }
      }

      // This block's range sum: ((w0 + w1) + (w2 + w3)) + ((w4 + w5) + (w6 + w7)), in warp 0,
      // from warps 1..7's part[b] and its own c.
      const uint32_t b = use % C::kSumBufs, round = use / C::kSumBufs;
      if (warp > 0) {
        if constexpr (C::kSumBufs == 1) {  // warp 0 has read the previous tile's part
          if (use > 0) cuda::named_barrier(kPartBarrier, kConsumerWarps * 32);
        }
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int q = 0; q < 4; ++q) sm.part[b][warp - 1].v[j][q][lane] = c[j][q];
        }
      }
      cuda::named_barrier(kSumBarrier, kConsumerWarps * 32);
      // Two buffers: part[b] is rewritten two tiles on, after warp 0 has passed the next
      // barrier; one: after warp 0's arrival on kPartBarrier.
      if (warp != 0) continue;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const auto& w = sm.part[b];
          c[j][q] = ((c[j][q] + w[0].v[j][q][lane]) + (w[1].v[j][q][lane] + w[2].v[j][q][lane])) +
                    ((w[3].v[j][q][lane] + w[4].v[j][q][lane]) +
                     (w[5].v[j][q][lane] + w[6].v[j][q][lane]));
        }
      }
      if constexpr (C::kSumBufs == 1) {  // its reads are done: the warps may write the next tile's
        if (tile + p.clusters < p.tiles)
          cuda::named_barrier_arrive(kPartBarrier, kConsumerWarps * 32);
      }
      if (rank > 0) {
        // Wait until rank 0 has read this buffer's previous tile, then post the sums and arrive.
        if (round > 0) cuda::mbar_wait_cluster(&sm.freed[b], (round - 1) & 1);
        TileSums<kNTiles>* dst = cg::this_cluster().map_shared_rank(&sm.inbox[b][rank - 1], 0);
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int q = 0; q < 4; ++q) dst->v[j][q][lane] = c[j][q];
        }
        cuda::mbar_arrive_cluster(&sm.ready[b], 0);
        continue;
      }
      if (splits > 1) {
        cuda::mbar_wait_cluster(&sm.ready[b], round & 1);
        for (int r = 1; r < splits; ++r) {
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
            for (int q = 0; q < 4; ++q) c[j][q] += sm.inbox[b][r - 1].v[j][q][lane];
          }
        }
        for (int r = 1; r < splits; ++r) cuda::mbar_arrive_cluster(&sm.freed[b], r);
      }
      if (p.input_rms) {
        if (use == 0) {
          cuda::named_barrier(kRmsBarrier, 64);  // the rms warp's sums are in
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              const float ss = sm.sumsq[min(j * 8 + 2 * t + q, p.n_tokens - 1)];
              scale[j][q] = 1.f / sqrtf(ss / static_cast<float>(p.in) + p.input_rms_eps);
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int q = 0; q < 4; ++q) c[j][q] *= scale[j][q & 1];
        }
      }
      Store::store(p, tile, g, t, c, prev);
    }
    // No block leaves while another may still access its shared memory. Rank 0's (inbox, ready)
    // is written only before its own last wait on `ready`, so it exits at once; a rank > 0 waits
    // until rank 0 has arrived on its `freed` for its last kSumBufs tiles (tile u: buffer
    // u % kSumBufs, phase parity (u / kSumBufs) & 1), instead of every block waiting for rank 0's
    // last store at a cluster barrier.
    if (warp == 0 && rank > 0) {
      constexpr uint32_t kBufs = C::kSumBufs;
      for (uint32_t u = use >= kBufs ? use - kBufs : 0; u < use; ++u) {
        cuda::mbar_wait_cluster(&sm.freed[u % kBufs], (u / kBufs) & 1);
      }
    }
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
    const auto kernel = linear_persistent_kernel<C, Store>;
    const int smem = static_cast<int>(sizeof(Smem<C>));
    allow_smem<C, Store>();
    std::array<int64_t, 4> r{};
    int per_sm = 0;
    TANDEM_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
    r[0] = static_cast<int64_t>(per_sm) * cuda::sm_count();
    for (int e = 1; e < 4; ++e) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(1u << e, 1, 1);
      cfg.blockDim = dim3(kThreads, 1, 1);
      cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = 1u << e;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      TANDEM_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
      r[e] = clusters;
    }
    return r;
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
const std::array<int64_t, 4>& plan_resident() {
  return resident_clusters<PlanCfg, StoreY<__nv_bfloat16>>();
}

template <class C, class Store>
void launch_cfg(const LinearShape& s, cudaStream_t stream) {
  static_assert(sizeof(Smem<C>) <= 227 * 1024, "shared memory of one block on sm_90");
  TANDEM_CHECK(s.n <= C::kXRows, "linear_skinny_persistent: {} tokens for {} token rows", s.n,
               C::kXRows);
  allow_smem<C, Store>();
  const int64_t tiles = (s.out_f + kRows - 1) / kRows;
  const LinearPlan plan =
      plan_linear(tiles, s.in, kLinearPlanChunkK, plan_resident(), cuda::sm_count());
  const Params p{static_cast<const __nv_bfloat16*>(s.x),
                 static_cast<const __nv_bfloat16*>(s.w),
                 s.out,
                 s.x_stride,
                 s.out_stride,
                 s.in,
                 s.out_f,
                 tiles,
                 plan.clusters,
                 plan.range_k,
                 plan.splits,
                 static_cast<int>(s.n),
                 s.input_rms,
                 s.input_rms_eps};
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

void linear_skinny_persistent(const LinearShape& s, bool f32_out, int config, cudaStream_t stream) {
  TANDEM_CHECK(s.epilogue == LinearEpilogue::kNone ||
                   (!f32_out && (s.epilogue == LinearEpilogue::kAddToOut || s.out_f % kRows == 0)),
               "linear_skinny_persistent: the epilogues need bf16 out, and swiglu a multiple of {} "
               "rows, got out_f {}",
               kRows, s.out_f);
  TANDEM_CHECK(s.n >= 1 && s.n <= kWideMaxTokens,
               "linear_skinny_persistent: {} tokens (1 to {} per launch)", s.n, kWideMaxTokens);
  if (s.epilogue == LinearEpilogue::kSwiGluPairs) {
    return launch_n<StoreSwiGluPairs>(s, config, stream);
  }
  if (s.epilogue == LinearEpilogue::kAddToOut) return launch_n<StoreAddY>(s, config, stream);
  f32_out ? launch_n<StoreY<float>>(s, config, stream)
          : launch_n<StoreY<__nv_bfloat16>>(s, config, stream);
}

}  // namespace tandem::kernels
