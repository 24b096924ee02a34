// The persistent decode linear's work split (src/kernels/linear/linear_plan.h), checked on the
// CPU over many shapes and GPUs: every k is covered exactly once by non-empty ranges the kernel
// can copy (multiples of 8 k; of 128 for FP8 weights), the clusters fit and have work, and on the
// Qwen3.5-27B shapes the busiest SM streams close to its fair share; and the persistent kernel's
// chunk loops and the wgmma kernel's walk (models of them) run the decode order's k16 steps in its
// order whatever the chunk size.
#include "kernels/linear/linear_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem::kernels {
namespace {

struct Gpu {
  const char* name;
  int sms;
  std::array<int64_t, 4> resident;  // clusters of 1, 2, 4, 8 blocks that fit at once
};

// One block per SM (the production configuration) on an H200-like and a smaller GPU, two per SM,
// and a GPU where clusters of 8 do not fit at all.
const Gpu kGpus[] = {{"132 SMs, 1 block/SM", 132, {132, 66, 32, 16}},
                     {"78 SMs, 1 block/SM", 78, {78, 39, 18, 8}},
                     {"132 SMs, 2 blocks/SM", 132, {264, 132, 66, 32}},
                     {"132 SMs, no 8-clusters", 132, {132, 66, 32, 0}}};

TEST(LinearPlan, RangesCoverEveryKOnceAndClustersFit) {
  const std::vector<int64_t> tile_counts = {1, 2, 7, 20, 63, 128, 320, 896, 1030, 2176, 15520};
  const std::vector<int64_t> ins = {8, 64, 520, 1000, 1024, 2048, 4104, 5120, 6144, 17408, 40000};
  int checked = 0;
  for (const Gpu& gpu : kGpus) {
    for (const int64_t chunk_k : {256, 1024}) {
      for (const int64_t tiles : tile_counts) {
        for (const int64_t in : ins) {
          const LinearPlan p = plan_linear(tiles, in, chunk_k, gpu.resident, gpu.sms);
          const std::string what = std::string(gpu.name) + " tiles=" + std::to_string(tiles) +
                                   " in=" + std::to_string(in) +
                                   " chunk=" + std::to_string(chunk_k);
          ASSERT_TRUE(p.splits == 1 || p.splits == 2 || p.splits == 4 || p.splits == 8) << what;
          EXPECT_EQ(p.range_k % 8, 0) << what;
          EXPECT_GE(p.splits * p.range_k, in) << what;        // every k has a rank
          EXPECT_LT((p.splits - 1) * p.range_k, in) << what;  // and no rank is empty
          if (p.splits > 1) {
            EXPECT_GE(2 * p.range_k, chunk_k) << what;  // at least half a chunk per rank
          }
          EXPECT_GE(p.clusters, 1) << what;
          EXPECT_LE(p.clusters, tiles) << what;  // every cluster has a tile
          int e = 0;
          while ((1 << e) < p.splits) ++e;
          EXPECT_LE(p.clusters, gpu.resident[e]) << what;  // all clusters resident at once
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 2 * 11 * 11);
}

// FP8 weights (linear_fp8_cuda.cu): 2048-k chunks and ranges aligned to the 128-k scale blocks,
// so that no rank's range starts inside a block; the same coverage rules as above.
TEST(LinearPlan, Fp8RangesAreWholeScaleBlocks) {
  const std::vector<int64_t> tile_counts = {1, 7, 320, 1030, 2176, 15520};
  const std::vector<int64_t> ins = {16, 64, 336, 1024, 4096, 5120, 6144, 17408, 40000};
  int checked = 0;
  for (const Gpu& gpu : kGpus) {
    for (const int64_t tiles : tile_counts) {
      for (const int64_t in : ins) {
        const LinearPlan p = plan_linear(tiles, in, 2048, gpu.resident, gpu.sms, 128);
        const std::string what =
            std::string(gpu.name) + " tiles=" + std::to_string(tiles) + " in=" + std::to_string(in);
        EXPECT_EQ(p.range_k % 128, 0) << what;
        EXPECT_GE(p.splits * p.range_k, in) << what;
        EXPECT_LT((p.splits - 1) * p.range_k, in) << what;
        if (p.splits > 1) {
          EXPECT_GE(2 * p.range_k, 2048) << what;
        }
        EXPECT_GE(p.clusters, 1) << what;
        EXPECT_LE(p.clusters, tiles) << what;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * 6 * 9);
  // The default alignment is the bf16 kernels' 8: their plans did not move.
  const LinearPlan a = plan_linear(1030, 5120, 1024, kGpus[0].resident, 132);
  const LinearPlan b = plan_linear(1030, 5120, 1024, kGpus[0].resident, 132, 8);
  EXPECT_EQ(a.splits, b.splits);
  EXPECT_EQ(a.range_k, b.range_k);
  EXPECT_EQ(a.clusters, b.clusters);
}

// The busiest block's share of the weight stream against a perfect split over the SMs, for the
// Qwen3.5-27B decode projections and lm_head at 1024-k chunks on the H200-like GPU.
TEST(LinearPlan, Qwen35_27bShapesAreBalanced) {
  const Gpu& gpu = kGpus[0];
  struct Shape {
    const char* name;
    int64_t out_f, in;
  };
  for (const Shape s : {Shape{"gate|up", 34816, 5120}, Shape{"in_proj", 16480, 5120},
                        Shape{"q|k|v", 14336, 5120}, Shape{"down", 5120, 17408},
                        Shape{"out/o_proj", 5120, 6144}, Shape{"lm_head", 248320, 5120}}) {
    const int64_t tiles = (s.out_f + 15) / 16;
    const LinearPlan p = plan_linear(tiles, s.in, 1024, gpu.resident, gpu.sms);
    const double busiest =
        static_cast<double>((tiles + p.clusters - 1) / p.clusters) * static_cast<double>(p.range_k);
    const double fair = static_cast<double>(tiles) * static_cast<double>(s.in) / gpu.sms;
    EXPECT_LE(busiest / fair, 1.06) << s.name << ": splits " << p.splits << ", clusters "
                                    << p.clusters << ", range_k " << p.range_k;
  }
}

// Few tiles get split, many do not: the plan answers the shape, not a fixed rule.
TEST(LinearPlan, SplitsFollowTheShape) {
  const Gpu& gpu = kGpus[0];
  EXPECT_EQ(plan_linear(15520, 5120, 1024, gpu.resident, gpu.sms).splits, 1);  // lm_head
  EXPECT_GT(plan_linear(320, 17408, 1024, gpu.resident, gpu.sms).splits, 1);   // down_proj
  EXPECT_EQ(plan_linear(7, 4104, 1024, gpu.resident, gpu.sms).splits, 8);      // 7 tiles, long k
  EXPECT_EQ(plan_linear(7, 1024, 1024, gpu.resident, gpu.sms).splits, 2);      // k of 2 halves
}

// The decode order's k16 steps of class c over a rank's range of `len` k (linear_plan.h), as the
// persistent kernel runs them with chunks of chunk_k: in each chunk, the class's piece of the
// plan's 1024-k chunk that holds it, if it lies in this chunk, its steps below len in order.
std::vector<int64_t> persistent_steps(int64_t len, int64_t chunk_k, int c) {
  std::vector<int64_t> steps;
  const int64_t count = (len + chunk_k - 1) / chunk_k;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t piece = i * chunk_k / kLinearPlanChunkK * kLinearPlanChunkK + c * kPieceK;
    if (piece < i * chunk_k || piece >= (i + 1) * chunk_k) continue;
    for (int64_t k = piece; k < piece + kPieceK && k < len; k += 16) steps.push_back(k);
  }
  return steps;
}

// The same as the wgmma kernel walks them: per class, its 64-k stages of every chunk in order,
// each of four k16 steps (those at or past len read zeros there and are left out here).
std::vector<int64_t> gemm_steps(int64_t len, int c) {
  std::vector<int64_t> steps;
  const int64_t chunks = (len + kLinearPlanChunkK - 1) / kLinearPlanChunkK;
  for (int64_t i = 0; i < chunks; ++i) {
    for (int64_t h = 0; h < kPieceK / kLinearRangeAlign; ++h) {
      const int64_t stage = i * kLinearPlanChunkK + c * kPieceK + h * kLinearRangeAlign;
      if (stage >= len) continue;
      for (int64_t k = stage; k < stage + kLinearRangeAlign; k += 16) {
        if (k < len) steps.push_back(k);
      }
    }
  }
  return steps;
}

// Every configuration's chunks (256, 512 and production's 1024) and the wgmma kernel's walk give
// each class the same k16 steps in the same order, over every range length (multiples of 8), and
// together the classes cover the range's steps once.
TEST(LinearPlan, KernelsRunTheDecodeOrder) {
  int checked = 0;
  for (int64_t len = 8; len <= 6 * 1024 + 8; len += 8) {
    std::vector<int64_t> all;
    for (int c = 0; c < 8; ++c) {
      const auto production = persistent_steps(len, kLinearPlanChunkK, c);
      for (const int64_t chunk_k : {256, 512}) {
        ASSERT_EQ(persistent_steps(len, chunk_k, c), production)
            << "len " << len << " chunk " << chunk_k << " class " << c;
        ++checked;
      }
      ASSERT_EQ(gemm_steps(len, c), production) << "len " << len << " class " << c;
      all.insert(all.end(), production.begin(), production.end());
    }
    std::sort(all.begin(), all.end());
    ASSERT_EQ(static_cast<int64_t>(all.size()), (len + 15) / 16) << "len " << len;
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<int64_t>(16 * i));
  }
  EXPECT_EQ(checked, 769 * 8 * 2);
  // The FP8 kernels' order still runs masked steps to the plan chunk's end.
  EXPECT_EQ(linear_masked_end(0), 0);
  EXPECT_EQ(linear_masked_end(8), 1024);
  EXPECT_EQ(linear_masked_end(1024), 1024);
  EXPECT_EQ(linear_masked_end(2056), 3072);
}

// FP8 weights: one rank over the whole k where a matrix has two or more 16-row tiles per SM (every
// 27B FP8 shape), plan_linear's plan otherwise (the 0.8B shape's narrow matrices).
TEST(LinearPlan, Fp8PlanTakesOneRankWhereTilesAreTwoPerSm) {
  const std::array<int64_t, 4> resident = {132, 66, 32, 16};
  const std::pair<int64_t, int64_t> wide[] = {
      {34816, 5120}, {16480, 5120}, {14336, 5120}, {5120, 17408}, {5120, 6144}};
  for (const auto& [out_f, in] : wide) {
    const int64_t tiles = (out_f + 15) / 16;
    const LinearPlan p = plan_linear_fp8(tiles, in, 2048, resident, 132, 128);
    EXPECT_EQ(p.splits, 1) << out_f << "x" << in;
    EXPECT_EQ(p.clusters, 132) << out_f << "x" << in;
    EXPECT_EQ(p.range_k, (in + 127) / 128 * 128) << out_f << "x" << in;
  }
  // [5120, 6144] was 2 ranks of 3,072 k under plan_linear (the 48 KB tiles measured slower).
  EXPECT_EQ(plan_linear(320, 6144, 2048, resident, 132, 128).splits, 2);
  for (const auto& [out_f, in] : {std::pair<int64_t, int64_t>{1024, 1024}, {4096, 2048}}) {
    const int64_t tiles = (out_f + 15) / 16;  // 64 and 256 tiles: fewer than 264
    const LinearPlan p = plan_linear_fp8(tiles, in, 2048, resident, 132, 128);
    const LinearPlan q = plan_linear(tiles, in, 2048, resident, 132, 128);
    EXPECT_EQ(p.splits, q.splits);
    EXPECT_EQ(p.clusters, q.clusters);
    EXPECT_EQ(p.range_k, q.range_k);
  }
}

// The benchmarks' forced plans (plan_linear_splits): plan_linear's own plan when the ranks agree,
// and on the FP8 27B shapes 1, 2 and 4 ranks that cover every k with non-empty, 128-k-aligned
// ranges on as many clusters as fit.
TEST(LinearPlan, ForcedSplitsAgreeWithThePlanAndCoverEveryK) {
  const std::array<int64_t, 4> resident = {132, 66, 32, 16};
  const std::pair<int64_t, int64_t> shapes[] = {
      {34816, 5120}, {16480, 5120}, {14336, 5120}, {5120, 17408}, {5120, 6144}};
  for (const auto& [out_f, in] : shapes) {
    const int64_t tiles = (out_f + 15) / 16;
    const LinearPlan own = plan_linear(tiles, in, 2048, resident, 132, 128);
    const LinearPlan same = plan_linear_splits(tiles, in, own.splits, resident, 128);
    EXPECT_EQ(same.splits, own.splits);
    EXPECT_EQ(same.clusters, own.clusters) << out_f << "x" << in;
    EXPECT_EQ(same.range_k, own.range_k) << out_f << "x" << in;
    for (const int splits : {1, 2, 4}) {
      const LinearPlan p = plan_linear_splits(tiles, in, splits, resident, 128);
      ASSERT_TRUE(plan_linear_splits_ok(p, in, resident)) << out_f << "x" << in << " " << splits;
      EXPECT_EQ(p.range_k % 128, 0);
      EXPECT_GE(p.splits * p.range_k, in);
      EXPECT_EQ(p.clusters, std::min(tiles, resident[linear_splits_level(splits)]));
    }
  }
  // A rank left without k, a cluster size that does not fit, a rank count of 3: refused.
  EXPECT_FALSE(plan_linear_splits_ok(plan_linear_splits(10, 256, 4, resident, 128), 256, resident));
  EXPECT_FALSE(plan_linear_splits_ok(plan_linear_splits(10, 6144, 8, {132, 66, 32, 0}, 128), 6144,
                                     {132, 66, 32, 0}));
  EXPECT_FALSE(
      plan_linear_splits_ok(plan_linear_splits(10, 6144, 3, resident, 128), 6144, resident));
}

}  // namespace
}  // namespace tandem::kernels
