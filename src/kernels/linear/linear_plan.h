// The work split of the persistent decode linear (linear_persistent_cuda.cu): into how many k
// ranges each 16-row weight tile is cut, how long they are, and how many thread-block clusters
// share the tiles. A pure function of the weight shape and the GPU (SM count, how many clusters of
// each size fit at once), never of n_tokens: the decode linear's row invariance rests on that.
// Host code, tested on the CPU (tests/kernels/linear_plan_test.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

namespace tandem::kernels {

struct LinearPlan {
  int splits = 1;        // k ranges per tile = blocks per cluster: 1, 2, 4 or 8
  int64_t clusters = 1;  // cluster c takes tiles c, c + clusters, ...
  // A multiple of k_align; rank r covers k in [r range_k, min(in, (r+1) range_k)).
  int64_t range_k = 0;
};

// Every configuration of the kernel (ring depth, chunk size, 1 to 4 B tiles) runs the plan made for
// production's 1..4-token configuration, whose chunks are kLinearPlanChunkK: a token's bits depend
// on the plan, so one plan per weight shape is what makes them independent of n_tokens.
constexpr int64_t kLinearPlanChunkK = 1024;

// The bf16 decode order (docs/cuda.md, "The decode order"): rank r's range is cut into
// kLinearPlanChunkK chunks from its start; class c (0..7) owns the kPieceK-k piece
// [c kPieceK, (c + 1) kPieceK) of every chunk and sums its pieces in one chain of natural k16
// tensor-core steps; the range's sum adds the classes left to right, the total the ranks left to
// right. Ranges are multiples of kLinearRangeAlign (the GEMM's stage: no stage straddles two).
constexpr int64_t kPieceK = 128;
constexpr int64_t kLinearRangeAlign = 64;

// The end (relative to the range start) of the k-steps production runs for a rank's range of
// `len` k: its 1024-k chunks run every step of their last chunk, those past `len` with zero
// operands. A configuration with shorter chunks runs the missing masked steps too (same place in
// each warp's sequence: the end), so that its accumulators see production's exact sequence.
constexpr int64_t linear_masked_end(int64_t len) {
  return (len + kLinearPlanChunkK - 1) / kLinearPlanChunkK * kLinearPlanChunkK;
}

// tiles: 16-row weight tiles; in: k (a multiple of 8); chunk_k: k per ring slot; resident[e]:
// clusters of 2^e blocks that fit on the GPU at once; sms: the SM count. Picks the fewest splits
// whose predicted time (in chunk-times of one SM) is within a hair of the best: each SM streams
// its share of the k ranges, a cluster's tiles are serial, and a block streams at its share of
// its SM's rate. Every rank gets a non-empty range of at least half a chunk. k_align: ranges are
// multiples of it (8; FP8 weights: 128, so that no k-step straddles a scale block).
inline LinearPlan plan_linear(int64_t tiles, int64_t in, int64_t chunk_k,
                              const std::array<int64_t, 4>& resident, int sms,
                              int64_t k_align = 8) {
  const auto align = [k_align](int64_t k) { return (k + k_align - 1) / k_align * k_align; };
  LinearPlan best{1, 1, align(in)};
  double best_cost = 1e300;
  for (int e = 0; e < 4; ++e) {
    const int splits = 1 << e;
    const int64_t range_k = align((in + splits - 1) / splits);
    if (splits > 1 && (2 * range_k < chunk_k || (splits - 1) * range_k >= in)) break;
    if (resident[e] < 1) continue;
    const double per = static_cast<double>(range_k) / static_cast<double>(chunk_k);
    const int64_t clusters = std::min(tiles, resident[e]);
    const double blocks_per_sm = static_cast<double>(resident[e] * splits) / sms;
    const double sm_cost = std::ceil(static_cast<double>(tiles * splits) / sms) * per;
    const double block_cost =
        static_cast<double>((tiles + clusters - 1) / clusters) * per * std::max(blocks_per_sm, 1.0);
    const double cost = std::max(sm_cost, block_cost);
    if (cost < best_cost * 0.995) {
      best_cost = cost;
      best = {splits, clusters, range_k};
    }
  }
  return best;
}

// log2 of a plan's ranks per tile (1, 2, 4 or 8): its index in `resident`; -1 for other counts.
constexpr int linear_splits_level(int splits) {
  return splits == 1 ? 0 : splits == 2 ? 1 : splits == 4 ? 2 : splits == 8 ? 3 : -1;
}

// Benchmarks, and plan_linear_fp8's one rank (a plan other than plan_linear's changes every row's
// bits): `splits` ranks of
// k_align-multiple ranges, as many clusters as fit. plan_linear_splits_ok says whether it can run:
// a rank count of 1, 2, 4 or 8 whose clusters fit, and every rank's range non-empty
// ((splits - 1) x range_k < in).
inline LinearPlan plan_linear_splits(int64_t tiles, int64_t in, int splits,
                                     const std::array<int64_t, 4>& resident, int64_t k_align = 8) {
  const int e = linear_splits_level(splits);
  const int64_t range_k = (in + splits - 1) / splits;
  return {splits, e < 0 ? 0 : std::min(tiles, resident[e]),
          (range_k + k_align - 1) / k_align * k_align};
}
inline bool plan_linear_splits_ok(const LinearPlan& p, int64_t in,
                                  const std::array<int64_t, 4>& resident) {
  const int e = linear_splits_level(p.splits);
  return e >= 0 && resident[e] >= 1 && p.clusters >= 1 && (p.splits - 1) * p.range_k < in;
}

// FP8 weights' plan (linear_fp8_plan): one rank per tile (every tile's whole k in one block) where
// the matrix has at least two 16-row tiles per SM, else plan_linear's. At one row on the H200
// (2026-12-05, kernel_bench linear_fp8 with forced plans) one rank streamed out_proj/o_proj
// [5120, 6144] at 3.03 TB/s against plan_linear's 2 ranks' 2.54 (a rank's 48 KB tile pays a fixed
// cost as a 96 KB one does), gate|up 3.73 against 3.52, down 3.59 against 3.52, in_proj and q|k|v
// equal. Every FP8 kernel reads this plan, so their bits stay one another's (they change with it).
inline LinearPlan plan_linear_fp8(int64_t tiles, int64_t in, int64_t chunk_k,
                                  const std::array<int64_t, 4>& resident, int sms,
                                  int64_t k_align) {
  if (tiles >= 2 * int64_t{sms}) {
    const LinearPlan one = plan_linear_splits(tiles, in, 1, resident, k_align);
    if (plan_linear_splits_ok(one, in, resident)) return one;
  }
  return plan_linear(tiles, in, chunk_k, resident, sms, k_align);
}

}  // namespace tandem::kernels
