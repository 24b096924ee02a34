// Pieces shared by the decode-linear kernels that stream weights through a shared-memory ring
// (linear_persistent_cuda.cu: 16-row tiles, one bulk copy per row; the FP8 kernels
// linear_fp8_cuda.cu and linear_fp8_batch_cuda.cu; linear_wgmma_cuda.cu takes the store policies
// and the sums of squares): the warp roles, the producers' schedules, the store policies
// (epilogues), the input_rms sums of squares, and the end of a tile, i.e. the fixed order in which
// its 8 warp-class sums (left to right) and its k-split ranks' sums (in rank order) are added,
// either in the consumer warps (finish_tile) or in the rms warp while they stream on (the finisher
// form: post_tile_sums, finish_tiles). The kernels of one weight type run the same plan
// (linear_plan.h) and this one sequence of additions, so a row's bits do not depend on which
// kernel, or how many rows, computed it. Internal to src/kernels/linear.
#pragma once

#include <cooperative_groups.h>

#include <array>

#include "kernels/bulk_copy.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/linear/linear_cuda.cuh"
#include "kernels/linear/linear_plan.h"
#include "kernels/swiglu/swiglu.h"
#include "kernels/swiglu/swiglu_cuda.cuh"

namespace tandem::kernels::decode_linear {

namespace cg = cooperative_groups;

constexpr int kConsumerWarps = 8;  // one k-step of each chunk per warp
constexpr int kProducerWarp = kConsumerWarps;
constexpr int kRmsWarp = kConsumerWarps + 1;         // input_rms: the sums of squares
constexpr int kThreads = (kConsumerWarps + 2) * 32;  // + the producer and the rms warp
constexpr uint32_t kSumBarrier = 1;                  // consumer warps: part[] is written (256)
constexpr uint32_t kRmsBarrier = 2;                  // rms warp -> warp 0 (64 threads)
constexpr uint32_t kPartBarrier = 3;  // one sum buffer: warp 0 has read part[] (256 threads)
// The finisher form (finisher_warp, 1..kMaxSumBufs sum buffers): the rms warp ends every tile, the
// 8 consumer warps only post their sums. Buffer b's barriers: posted (the 8 parts are in) and read
// (the finisher is done with them), each of the consumers and the finisher (288 threads).
constexpr int kMaxSumBufs = 4;           // as many as a super-tile's row tiles
constexpr uint32_t kPostedBarrier0 = 4;  // + b: 4..7
constexpr uint32_t kReadBarrier0 = 9;    // + b: 9..12 (8: linear_fp8_cuda.cu's stage barrier)
constexpr uint32_t kFinisherThreads = (kConsumerWarps + 1) * 32;
constexpr int kRows = 16;
constexpr int kMaxSplits = 8;  // portable cluster size

// One tile's sums in the mma C layout: v[j][q][lane] is row g (+8 if q >= 2), token
// 8j + 2t + (q & 1).
template <int kNTiles>
struct TileSums {
  float v[kNTiles][4][32];
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
  // FP8 weights (linear_fp8_cuda.cu; w then points at f8_e4m3 bytes): block scales, their row
  // stride and log2 of their rows per block, and the folded norm's g (or null).
  const float* w_scale;
  int64_t scale_cols;
  int scale_shift;
  const __nv_bfloat16* fold;
};

// A decode kernel's shared memory: its ring of slots (SlotT: the kernel's own chunk layout), the
// ring's barriers and the sums of the end of a tile (init_barriers and finish_tile use these
// names). Tile u uses sum buffer u % kSumBufs (its round: u / kSumBufs, the parity of its phases).
// kParts: the warp sums a tile's end reads from shared memory, 7 (warp 0 keeps its own) or 8 (the
// finisher form).
template <class SlotT, int kStages, int kSumBufs, int kNTiles, int kParts = kConsumerWarps - 1>
struct RingSmem {
  SlotT ring[kStages];                       // first: 128-byte aligned (tensor-map boxes)
  uint64_t full[kStages];                    // chunk landed (copied bytes, and any other arrivals)
  uint64_t empty[kStages];                   // every consumer warp is done with the slot
  uint64_t ready[kSumBufs];                  // rank 0: the other ranks' sums of a tile are in
  uint64_t freed[kSumBufs];                  // rank > 0: rank 0 has read this rank's inbox slot
  TileSums<kNTiles> part[kSumBufs][kParts];  // warps 1..7's sums, or 0..7's (finisher form)
  TileSums<kNTiles> inbox[kSumBufs][kMaxSplits - 1];  // rank 0: ranks 1..7's range sums
  float sumsq[8 * kNTiles];  // rank 0, input_rms: each token's sum of squares
};

// A launch's parameters: the call's shape, its 16-row tiles, the plan's k split and `clusters`
// clusters launched. Host code.
inline Params decode_params(const LinearShape& s, const LinearPlan& plan, int64_t clusters) {
  return Params{static_cast<const __nv_bfloat16*>(s.x),
                static_cast<const __nv_bfloat16*>(s.w),
                s.out,
                s.x_stride,
                s.out_stride,
                s.in,
                s.out_f,
                (s.out_f + kRows - 1) / kRows,
                clusters,
                plan.range_k,
                plan.splits,
                static_cast<int>(s.n),
                s.input_rms,
                s.input_rms_eps,
                s.w_scale,
                (s.in + 127) / 128,
                __builtin_ctzll(static_cast<unsigned long long>(s.scale_block_rows)),
                static_cast<const __nv_bfloat16*>(s.fold)};
}

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

// kAddToOut's one element: round(prev + round(y)), prev the out value as f32.
__device__ __forceinline__ __nv_bfloat16 add_to_out(float prev, float y) {
  return __float2bfloat16_rn(prev + __bfloat162float(__float2bfloat16_rn(y)));
}

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
      out[at] = add_to_out(prev[j][q], c[j][q]);
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

// A block's place in the plan: its rank in the cluster, its cluster, and the rank's k range
// [k_begin, k_end) (len k), streamed in chunks (the last one shorter).
struct BlockRange {
  int rank;
  int64_t cluster_id, k_begin, k_end, len;
};
__device__ __forceinline__ BlockRange block_range(const Params& p) {
  BlockRange r;
  r.rank = static_cast<int>(blockIdx.x) % p.splits;
  r.cluster_id = blockIdx.x / p.splits;
  r.k_begin = r.rank * p.range_k;
  r.k_end = min(p.in, r.k_begin + p.range_k);
  r.len = max(r.k_end - r.k_begin, int64_t{0});
  return r;
}

// The wait that pairs with init_barriers' cluster arrival (no cluster: nothing).
__device__ __forceinline__ void cluster_wait(int splits) {
  if (splits > 1) cg::this_cluster().barrier_wait();
}

// The producer warp's schedule in the kernels that stream a cluster's tiles c, c + clusters, ...
// (persistent, FP8): the first tile's first kSlots chunks of weights go out before the previous
// kernel has finished (programmatic dependent launch), their tokens, its output, only after; then
// slot after slot, each once the consumers have freed it. issue_w(tile, chunk, slot) copies a
// chunk's weights (and expects its tokens' bytes too), issue_x(chunk, slot) its tokens.
template <uint32_t kSlots, class S, class IssueW, class IssueX>
__device__ __forceinline__ void produce_tiles(const Params& p, S& sm, int64_t first, int64_t count,
                                              IssueW&& issue_w, IssueX&& issue_x) {
  const int64_t pre = first < p.tiles ? min(count, static_cast<int64_t>(kSlots)) : 0;
  for (int64_t i = 0; i < pre; ++i) issue_w(first, i, static_cast<uint32_t>(i));
  cluster_wait(p.splits);
  cuda::pdl_begin();
  for (int64_t i = 0; i < pre; ++i) issue_x(i, static_cast<uint32_t>(i));
  uint32_t it = static_cast<uint32_t>(pre);
  for (int64_t tile = first; tile < p.tiles; tile += p.clusters) {
    for (int64_t i = tile == first ? pre : 0; i < count; ++i, ++it) {
      const uint32_t slot = it % kSlots, round = it / kSlots;
      if (round > 0) cuda::mbar_wait(&sm.empty[slot], (round - 1) & 1);
      issue_w(tile, i, slot);
      issue_x(i, slot);
    }
  }
}

// The producer warp's schedule in the kernels that stream a cluster's contiguous tiles
// [t_begin, t_end) in super-tiles of kRowTiles (batched bf16 and FP8; the last one may be shorter):
// as produce_tiles, the first super-tile's first kSlots chunks of weights before the previous
// kernel has finished, their tokens after. issue_w(tile0, row tiles, chunk, slot) copies a chunk of
// the super-tile's weights (and expects its tokens' bytes too), issue_x(chunk, slot) its tokens.
template <uint32_t kSlots, int kRowTiles, class S, class IssueW, class IssueX>
__device__ __forceinline__ void produce_super_tiles(S& sm, int splits, int64_t t_begin,
                                                    int64_t t_end, int64_t count, IssueW&& issue_w,
                                                    IssueX&& issue_x) {
  const auto tiles_at = [&](int64_t tile0) {
    return static_cast<int>(min(int64_t{kRowTiles}, t_end - tile0));
  };
  const int64_t pre = t_begin < t_end ? min(count, static_cast<int64_t>(kSlots)) : 0;
  for (int64_t i = 0; i < pre; ++i)
    issue_w(t_begin, tiles_at(t_begin), i, static_cast<uint32_t>(i));
  cluster_wait(splits);
  cuda::pdl_begin();
  for (int64_t i = 0; i < pre; ++i) issue_x(i, static_cast<uint32_t>(i));
  uint32_t it = static_cast<uint32_t>(pre);
  for (int64_t tile0 = t_begin; tile0 < t_end; tile0 += kRowTiles) {
    for (int64_t i = tile0 == t_begin ? pre : 0; i < count; ++i, ++it) {
      const uint32_t slot = it % kSlots, round = it / kSlots;
      if (round > 0) cuda::mbar_wait(&sm.empty[slot], (round - 1) & 1);
      issue_w(tile0, tiles_at(tile0), i, slot);
      issue_x(i, slot);
    }
  }
}

// The rms warp: with input_rms, in a block that stores, each token's sum of squares into
// sm.sumsq, then the arrival warp 0 waits for before its first store.
template <int kLoads, class S>
__device__ __forceinline__ void rms_warp(const Params& p, S& sm, int lane, bool stores) {
  cluster_wait(p.splits);
  if (p.input_rms && stores) {
    cuda::pdl_begin();  // x is the previous kernel's output
    sum_squares<kLoads>(p, lane, sm.sumsq);
    cuda::named_barrier_arrive(kRmsBarrier, 64);
  }
}

// input_rms: a token's inverse RMS from its sum of squares ss.
__device__ __forceinline__ float inverse_rms_of(const Params& p, float ss) {
  return 1.f / sqrtf(ss / static_cast<float>(p.in) + p.input_rms_eps);
}

// input_rms: the inverse RMS of the tokens of lane column t (8j + 2t + q, clamped to the last
// token) from their sums of squares.
template <int kNTiles>
__device__ __forceinline__ void inverse_rms(const Params& p, const float* sumsq, int t,
                                            float (&scale)[kNTiles][2]) {
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const float ss = sumsq[min(j * 8 + 2 * t + q, p.n_tokens - 1)];
      scale[j][q] = inverse_rms_of(p, ss);
    }
  }
}

// The k-split ranks' exchange of a tile's range sums c (sum buffer b, its round): a rank > 0
// waits until rank 0 has read the buffer's previous tile, posts c to rank 0's inbox (DSMEM),
// arrives and returns false; rank 0 adds the other ranks' sums in rank order, frees their inbox
// slots and returns true (it goes on to store). One warp's lanes, each its own sums.
template <int kNTiles, class S>
__device__ __forceinline__ bool exchange_ranks(const Params& p, S& sm, float (&c)[kNTiles][4],
                                               uint32_t b, uint32_t round, int rank, int lane) {
  if (rank > 0) {
    if (round > 0) cuda::mbar_wait_cluster(&sm.freed[b], (round - 1) & 1);
    TileSums<kNTiles>* dst = cg::this_cluster().map_shared_rank(&sm.inbox[b][rank - 1], 0);
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) dst->v[j][q][lane] = c[j][q];
    }
    cuda::mbar_arrive_cluster(&sm.ready[b], 0);
    return false;
  }
  if (p.splits > 1) {
    cuda::mbar_wait_cluster(&sm.ready[b], round & 1);
    for (int r = 1; r < p.splits; ++r) {
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) c[j][q] += sm.inbox[b][r - 1].v[j][q][lane];
      }
    }
    for (int r = 1; r < p.splits; ++r) cuda::mbar_arrive_cluster(&sm.freed[b], r);
  }
  return true;
}

// input_rms: a tile's sums times each token's inverse RMS.
template <int kNTiles>
__device__ __forceinline__ void scale_sums(float (&c)[kNTiles][4],
                                           const float (&scale)[kNTiles][2]) {
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) c[j][q] *= scale[j][q & 1];
  }
}

// The end of a tile in a consumer warp, once its accumulators c hold the warp's class sums of this
// block's k range: the block's range sum (((w0 + w1) + w2) + ...) + w7, left to right, in warp 0,
// from warps 1..7's part[b]; a rank > 0 posts it to rank 0's inbox (DSMEM), rank 0 adds
// the ranks' sums in rank order, scales by the inverse RMS (input_rms) and stores through Store.
// `use` counts the tiles this block has finished (buffer use % kSumBufs, phase parity from
// use / kSumBufs); `has_next`: this block finishes another tile after this one. `scale` holds warp
// 0's inverse RMS per token, computed at use 0; `prev` the tile's old out values
// (Store::kReadsOut). S: the kernel's shared memory (part, inbox, ready, freed, sumsq).
template <int kNTiles, int kSumBufs, class Store, class S>
__device__ __forceinline__ void finish_tile(const Params& p, S& sm, float (&c)[kNTiles][4],
                                            const float (&prev)[kNTiles][4],
                                            float (&scale)[kNTiles][2], int64_t tile, uint32_t use,
                                            bool has_next, int warp, int lane, int rank) {
  const int g = lane >> 2, t = lane & 3;
  const uint32_t b = use % kSumBufs, round = use / kSumBufs;
  if (warp > 0) {
    if constexpr (kSumBufs == 1) {  // warp 0 has read the previous tile's part
      if (use > 0) cuda::named_barrier(kPartBarrier, kConsumerWarps * 32);
    }
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) sm.part[b][warp - 1].v[j][q][lane] = c[j][q];
    }
  }
  cuda::named_barrier(kSumBarrier, kConsumerWarps * 32);
  // Two buffers: part[b] is rewritten two tiles on, after warp 0 has passed the next barrier; one:
  // after warp 0's arrival on kPartBarrier.
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const auto& w = sm.part[b];
#pragma unroll
      for (int i = 0; i < kConsumerWarps - 1; ++i) c[j][q] += w[i].v[j][q][lane];  // in order
    }
  }
  if constexpr (kSumBufs == 1) {  // its reads are done: the warps may write the next tile's
    if (has_next) cuda::named_barrier_arrive(kPartBarrier, kConsumerWarps * 32);
  }
  if (!exchange_ranks<kNTiles>(p, sm, c, b, round, rank, lane)) return;
  if (p.input_rms) {
    if (use == 0) {
      cuda::named_barrier(kRmsBarrier, 64);  // the rms warp's sums are in
      inverse_rms<kNTiles>(p, sm.sumsq, t, scale);
    }
    scale_sums<kNTiles>(c, scale);
  }
  Store::store(p, tile, g, t, c, prev);
}

// A consumer warp after its last tile (`use` tiles finished): no block leaves while another may
// still access its shared memory. Rank 0's (inbox, ready) is written only before its own last wait
// on `ready`, so it exits at once; a rank > 0 waits until rank 0 has arrived on its `freed` for its
// last kSumBufs tiles (tile u: buffer u % kSumBufs, phase parity (u / kSumBufs) & 1), instead of
// every block waiting for rank 0's last store at a cluster barrier.
template <int kSumBufs, class S>
__device__ __forceinline__ void finish_exit(S& sm, uint32_t use, int warp, int rank) {
  if (warp == 0 && rank > 0) {
    for (uint32_t u = use >= kSumBufs ? use - kSumBufs : 0; u < use; ++u) {
      cuda::mbar_wait_cluster(&sm.freed[u % kSumBufs], (u / kSumBufs) & 1);
    }
  }
}

// The finisher form of the end of a tile (1..kMaxSumBufs buffers; S::part holds 8 warps' sums): the
// consumer warps post their class sums and go on streaming, and the rms warp (the finisher) adds
// them, exchanges the ranks' sums and stores, in the same order and arithmetic as finish_tile, so
// that the bits are finish_tile's. A tile's end then costs the consumers one barrier arrival, not
// a wait for the slowest warp and warp 0's exchange and store (in the FP8 kernel, whose tiles
// hold half the bytes of a bf16 tile, that wait was a quarter of the consumers' time).
// Consumer side: before rewriting buffer b (tile use, from use kSumBufs on) wait until the
// finisher has read it, write this warp's sums, arrive. With B buffers a tile's post waits for the
// finisher's reads of the tile B before it (B = 1..kMaxSumBufs).
template <int kNTiles, int kSumBufs = 2, class S>
__device__ __forceinline__ void post_tile_sums(S& sm, const float (&c)[kNTiles][4], uint32_t use,
                                               int warp, int lane) {
  static_assert(kSumBufs >= 1 && kSumBufs <= kMaxSumBufs);
  const uint32_t b = use % kSumBufs;
  if (use >= kSumBufs) cuda::named_barrier(kReadBarrier0 + b, kFinisherThreads);
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) sm.part[b][warp].v[j][q][lane] = c[j][q];
  }
  cuda::named_barrier_arrive(kPostedBarrier0 + b, kFinisherThreads);
}

// Finisher side, the rms warp of every block, for the block's `count` tiles first, first + step,
// ... in the consumers' order: with input_rms in a storing block, each token's sum of squares first
// (rms_warp's sums) and the inverse RMS per token; per tile, the old out values
// (Store::kReadsOut), then the warp tree, the ranks' exchange in rank order, the scale and the
// store of finish_tile; at the end finish_exit's wait of a rank > 0.
template <int kNTiles, int kSumBufs, int kRmsLoads, class Store, class S>
__device__ __forceinline__ void finish_tiles(const Params& p, S& sm, int lane, int rank,
                                             int64_t first, int64_t step, int64_t count,
                                             bool stores) {
  const int g = lane >> 2, t = lane & 3;
  cluster_wait(p.splits);
  float scale[kNTiles][2] = {};
  if (stores) {
    cuda::pdl_begin();  // x and out are the previous kernel's
    if (p.input_rms) {
      sum_squares<kRmsLoads>(p, lane, sm.sumsq);
      __syncwarp();
      inverse_rms<kNTiles>(p, sm.sumsq, t, scale);
    }
  }
  uint32_t use = 0;
  for (int64_t tile = first; use < count; tile += step, ++use) {
    const uint32_t b = use % kSumBufs, round = use / kSumBufs;
    float c[kNTiles][4], prev[kNTiles][4] = {};
    if constexpr (Store::kReadsOut) {
      if (stores) Store::load_prev(p, tile, g, t, prev);  // lands during the wait
    }
    cuda::named_barrier(kPostedBarrier0 + b, kFinisherThreads);
    const auto& w = sm.part[b];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        c[j][q] = w[0].v[j][q][lane];
#pragma unroll
        for (int i = 1; i < kConsumerWarps; ++i) c[j][q] += w[i].v[j][q][lane];  // in order
      }
    }
    if (use + kSumBufs < count) {  // the consumers rewrite buffer b at use + kSumBufs
      cuda::named_barrier_arrive(kReadBarrier0 + b, kFinisherThreads);
    }
    if (!exchange_ranks<kNTiles>(p, sm, c, b, round, rank, lane)) continue;
    if (p.input_rms) scale_sums<kNTiles>(c, scale);
    Store::store(p, tile, g, t, c, prev);
  }
  finish_exit<kSumBufs>(sm, use, 0, rank);
}

// The finisher of the kernels that take tiles c, c + clusters, ... (linear_fp8_cuda.cu).
template <int kNTiles, int kSumBufs, int kRmsLoads, class Store, class S>
__device__ __forceinline__ void finisher_warp(const Params& p, S& sm, int lane, int rank,
                                              int64_t cluster_id, bool stores) {
  const int64_t count =
      cluster_id < p.tiles ? (p.tiles - cluster_id + p.clusters - 1) / p.clusters : 0;
  finish_tiles<kNTiles, kSumBufs, kRmsLoads, Store>(p, sm, lane, rank, cluster_id, p.clusters,
                                                    count, stores);
}

// Initialises a block's ring and sum barriers (thread 0), then arrives at the cluster barrier
// that every thread waits at (cluster_wait) before any remote arrival or inbox write.
// full_arrivals: arrivals that complete a slot besides its bytes (1: the producer's expect_tx).
template <int kStages, int kSumBufs, class S>
__device__ __forceinline__ void init_barriers(S& sm, int splits, uint32_t full_arrivals = 1) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      cuda::mbar_init(&sm.full[s], full_arrivals);
      cuda::mbar_init(&sm.empty[s], kConsumerWarps);
    }
    for (int b = 0; b < kSumBufs; ++b) {
      cuda::mbar_init(&sm.ready[b], 32 * (splits - 1));  // every lane of warp 0 of each rank > 0
      cuda::mbar_init(&sm.freed[b], 32);                 // every lane of rank 0's warp 0
    }
    cuda::fence_mbar_init();
  }
  __syncthreads();  // this block's barriers are initialised
  if (splits > 1) cg::this_cluster().barrier_arrive();
}

// How many clusters of each size (1, 2, 4, 8 blocks) of `kernel` with `smem` bytes fit on the GPU
// at once (the kernel's dynamic shared memory limit already raised). Host code.
template <class Kernel>
std::array<int64_t, 4> measure_resident_clusters(Kernel kernel, int smem) {
  std::array<int64_t, 4> r{};
  int per_sm = 0;
  TANDEM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
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
}

}  // namespace tandem::kernels::decode_linear
