// The wgmma decode linear's units of work (src/kernels/linear/linear_split.h), on the CPU: under
// every rule the units of a call cover each (item, rank, class) exactly once, a split item's units
// take one rank each and post each of its sums to its own place, in the order the finish kernel
// reads them, and the posted sums fit the workspace, and on the Qwen3.5-27B shapes the rule
// picks what the H200 runs measured (docs/benchmarks-history.md, "Results: split mode").
#include "kernels/linear/linear_split.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/linear/linear_plan.h"

namespace tandem::kernels {
namespace {

constexpr int64_t kCapacity = kLinearSplitPostedFloats;  // production's workspace
constexpr int64_t kMaxSplitItems = kLinearSplitMaxItems;
const std::array<int64_t, 4> kH200Resident = {132, 66, 32, 16};  // the persistent kernel's plan

// A call as linear_wgmma_cuda.cu forms it: 64-row items at two blocks per SM, or 128-row items at
// one; kN tokens per item.
LinearSplitCall call_of(int64_t out_f, int64_t n, int kn, int groups) {
  LinearSplitCall c;
  c.tile_rows = 64 * groups;
  c.items = static_cast<int>((out_f + c.tile_rows - 1) / c.tile_rows * ((n + kn - 1) / kn));
  c.slots = 132 * (groups == 1 ? 2 : 1);
  c.piece_floats = int64_t{kn / 2} * 128 * groups;
  return c;
}

LinearPlan plan_of(int64_t out_f, int64_t in) {
  return plan_linear((out_f + 15) / 16, in, kLinearPlanChunkK, kH200Resident, 132,
                     kLinearRangeAlign);
}

TEST(LinearSplit, UnitsCoverEveryRankAndClassOnce) {
  int checked = 0;
  for (const LinearSplitRule rule :
       {LinearSplitRule::kProduction, LinearSplitRule::kBefore, LinearSplitRule::kClassGroups}) {
    for (const int items : {1, 7, 16, 80, 160, 224, 258, 264, 272, 320, 544, 1032}) {
      for (const int slots : {132, 264}) {
        for (const int splits : {1, 2, 4, 8}) {
          for (const int64_t piece : {int64_t{1024}, int64_t{16384}}) {
            const LinearPlan plan{splits, 1, 1024};
            const LinearSplitCall c{items, slots, 64, piece, 64};
            const LinearSplit s = pick_linear_split(c, plan, rule, kCapacity, kMaxSplitItems);
            const std::string what = "rule " + std::to_string(static_cast<int>(rule)) + ", items " +
                                     std::to_string(items) + ", slots " + std::to_string(slots) +
                                     ", splits " + std::to_string(splits);
            ASSERT_GE(s.whole, 0) << what;
            ASSERT_LE(s.whole, items) << what;
            ASSERT_EQ(s.parts, s.whole == items ? 1 : splits * s.cgroups) << what;
            ASSERT_EQ(kLinearClasses % s.cgroups, 0) << what;
            if (s.whole < items) {  // split: the posted sums fit; only where the rule allows it
              EXPECT_LE((items - s.whole) * linear_split_pieces(splits, s.cgroups) * piece,
                        kCapacity)
                  << what;
              EXPECT_GT(s.parts, 1) << what;
              if (rule != LinearSplitRule::kClassGroups) {
                EXPECT_EQ(s.cgroups, 1) << what;
              }
              if (rule == LinearSplitRule::kBefore) {
                EXPECT_EQ(s.whole, 0) << what;
              }
            }
            std::vector<int> seen(static_cast<size_t>(items) * splits * kLinearClasses, 0);
            // The posted sums: each split item's in its own run of linear_split_pieces places,
            // rank by rank, class by class, as finish_split_kernel reads them.
            const int64_t pieces = linear_split_pieces(splits, s.cgroups);
            std::vector<int> posted(static_cast<size_t>((items - s.whole) * pieces), 0);
            for (int u = 0; u < linear_split_units(items, s); ++u) {
              const LinearUnit w = linear_split_unit(s, splits, u);
              ASSERT_GE(w.item, 0) << what;
              ASSERT_LT(w.item, items) << what;
              EXPECT_EQ(w.split, w.item < s.whole ? -1 : w.item - s.whole) << what;
              if (w.split >= 0) {
                EXPECT_EQ(w.r1 - w.r0, 1) << what;
                for (int cl = w.c0; cl < (s.cgroups > 1 ? w.c1 : w.c0 + 1); ++cl) {
                  const int64_t at = linear_split_piece(w.split, w.r0, cl, splits, s.cgroups);
                  ASSERT_EQ(at,
                            w.split * pieces + (s.cgroups > 1 ? w.r0 * kLinearClasses + cl : w.r0))
                      << what;
                  ++posted[static_cast<size_t>(at)];
                }
              }
              for (int r = w.r0; r < w.r1; ++r) {
                for (int cl = w.c0; cl < w.c1; ++cl) {
                  ++seen[(static_cast<size_t>(w.item) * splits + r) * kLinearClasses + cl];
                }
              }
            }
            for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << what << ", at " << i;
            for (size_t i = 0; i < posted.size(); ++i) {
              ASSERT_EQ(posted[i], 1) << what << ", posted sum " << i;
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 12 * 2 * 4 * 2);
}

// The 27B decode shapes at the row counts the H200 runs measured (014e446): out_f = 5120 splits by
// rank below a wave; gate|up splits the 8 / 16 items left after whole waves; in_proj, whose plan
// has one rank, never splits; the rule before splits only below a wave.
TEST(LinearSplit, PicksWhatTheH200RunsMeasuredOnThe27BShapes) {
  const auto pick = [](int64_t out_f, int64_t in, int64_t n, int kn, int groups,
                       LinearSplitRule rule) {
    return pick_linear_split(call_of(out_f, n, kn, groups), plan_of(out_f, in), rule, kCapacity,
                             kMaxSplitItems);
  };
  for (const int64_t in : {int64_t{17408}, int64_t{6144}}) {  // down, out/o_proj: 80 items
    const LinearSplit s = pick(5120, in, 8, 16, 1, LinearSplitRule::kProduction);
    EXPECT_EQ(s.whole, 0);
    EXPECT_EQ(s.parts, 2);
    EXPECT_EQ(s.cgroups, 1);
    const LinearSplit g = pick(5120, in, 8, 16, 1, LinearSplitRule::kClassGroups);
    EXPECT_EQ(g.parts, 16);  // every class of both ranks its own unit
    EXPECT_EQ(g.cgroups, 8);
    const LinearSplit r = pick(5120, in, 256, 64, 1, LinearSplitRule::kProduction);  // 320 items
    EXPECT_EQ(r.whole, 264);
    EXPECT_EQ(r.parts, 2);
    EXPECT_EQ(pick(5120, in, 256, 64, 1, LinearSplitRule::kBefore).whole, 320);
  }
  const LinearSplit gate8 = pick(34816, 5120, 8, 16, 2, LinearSplitRule::kProduction);
  EXPECT_EQ(gate8.whole, 264);  // 272 items of 128 rows: two waves, 8 split by rank
  EXPECT_EQ(gate8.parts, 2);
  const LinearSplit gate256 = pick(34816, 5120, 256, 128, 2, LinearSplitRule::kProduction);
  EXPECT_EQ(gate256.whole, 528);
  EXPECT_EQ(gate256.parts, 2);
  EXPECT_EQ(pick(34816, 5120, 8, 16, 2, LinearSplitRule::kBefore).whole, 272);
  EXPECT_EQ(plan_of(16480, 5120).splits, 1);  // in_proj: one rank, nothing to split by rank
  EXPECT_EQ(pick(16480, 5120, 8, 16, 1, LinearSplitRule::kProduction).whole, 258);
  EXPECT_EQ(pick(16480, 5120, 128, 64, 1, LinearSplitRule::kProduction).whole, 516);
}

// No workspace room, no split: the posted sums of 80 items x 2 ranks at 64 tokens need 655,360
// floats (2.6 MB).
TEST(LinearSplit, RefusesWhatTheWorkspaceCannotHold) {
  const LinearSplitCall c = call_of(5120, 64, 64, 1);
  const LinearPlan plan = plan_of(5120, 6144);
  EXPECT_EQ(
      pick_linear_split(c, plan, LinearSplitRule::kProduction, kCapacity, kMaxSplitItems).parts, 2);
  EXPECT_EQ(pick_linear_split(c, plan, LinearSplitRule::kProduction, 1 << 19, kMaxSplitItems).whole,
            c.items);
}

}  // namespace
}  // namespace tandem::kernels
