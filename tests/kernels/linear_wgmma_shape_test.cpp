// The wgmma decode linear's item shapes (src/kernels/linear/linear_wgmma_shape.h), on the CPU: the
// busiest-SM count against a unit-by-unit deal, the estimate against the H200's measured calls
// (014e446's kernel_bench linear_batch for the rows rule's shapes, 2173990's for the cost rule's),
// what the cost rule picks on the Qwen3.5-27B shapes (the rows rule's shape up to 32 rows, 128-row
// items on the narrow matrices from 48 rows) and production's rule (the cost rule from 65 rows:
// docs/cuda.md, known gap 6).
#include "kernels/linear/linear_wgmma_shape.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tandem::kernels {
namespace {

const std::array<int64_t, 4> kH200Resident = {132, 66, 32, 16};  // the persistent kernel's plan

WgmmaCall call_27b(int64_t out_f, int64_t in, int64_t n) {
  WgmmaCall c;
  c.out_f = out_f, c.in = in, c.n = n, c.sms = 132;
  c.plan =
      plan_linear((out_f + 15) / 16, in, kLinearPlanChunkK, kH200Resident, 132, kLinearRangeAlign);
  return c;
}

std::string name(WgmmaItemShape s) { return std::to_string(s.tile_m) + "x" + std::to_string(s.n); }

TEST(WgmmaShape, BusiestSmMatchesDealingUnitsOneByOne) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int sms = 1 + static_cast<int>(rng() % 140);
    const int slots = sms * (1 + static_cast<int>(rng() % 2));
    const int units = 1 + static_cast<int>(rng() % 1200);
    const int whole = static_cast<int>(rng() % (units + 1));
    const int grid = std::min(units, slots);
    const double wb = 1 + rng() % 100;  // split units carry at most a whole unit's bytes
    const double sb = trial % 10 == 0 ? wb : 1 + static_cast<double>(rng() % static_cast<int>(wb));
    std::vector<double> per_sm(sms, 0.0);
    for (int u = 0; u < units; ++u) per_sm[(u % grid) % sms] += u < whole ? wb : sb;
    const double want = *std::max_element(per_sm.begin(), per_sm.end());
    ASSERT_EQ(wgmma_busiest_sm_bytes(units, whole, grid, sms, wb, sb), want)
        << "units " << units << " whole " << whole << " grid " << grid << " sms " << sms;
  }
}

// 014e446, kernel_bench linear_batch, "linear decode n=N production [out_f, in] (back to back)":
// out_f, in, rows, microseconds.
struct Measured {
  int64_t out_f, in, n;
  double us;
};
constexpr Measured kH200[] = {
    {34816, 5120, 8, 90.6},     {34816, 5120, 16, 89.3},    {34816, 5120, 32, 93.3},
    {34816, 5120, 64, 99.4},    {34816, 5120, 128, 113.9},  {34816, 5120, 256, 174.1},
    {34816, 5120, 512, 341.6},  {34816, 5120, 1024, 691.1}, {16480, 5120, 8, 41.3},
    {16480, 5120, 16, 41.3},    {16480, 5120, 32, 42.2},    {16480, 5120, 64, 43.6},
    {16480, 5120, 128, 66.3},   {16480, 5120, 256, 74.4},   {16480, 5120, 512, 144.9},
    {16480, 5120, 1024, 298.3}, {14336, 5120, 8, 38.7},     {14336, 5120, 16, 38.8},
    {14336, 5120, 32, 40.0},    {14336, 5120, 64, 41.5},    {14336, 5120, 128, 58.2},
    {14336, 5120, 256, 69.4},   {14336, 5120, 512, 130.8},  {14336, 5120, 1024, 252.2},
    {5120, 17408, 8, 52.7},     {5120, 17408, 16, 49.5},    {5120, 17408, 32, 50.9},
    {5120, 17408, 64, 52.1},    {5120, 17408, 128, 93.5},   {5120, 17408, 256, 143.0},
    {5120, 17408, 512, 160.2},  {5120, 17408, 1024, 314.0}, {5120, 6144, 8, 21.0},
    {5120, 6144, 16, 21.5},     {5120, 6144, 32, 22.0},     {5120, 6144, 64, 23.8},
    {5120, 6144, 128, 38.3},    {5120, 6144, 256, 51.7},    {5120, 6144, 512, 67.9},
    {5120, 6144, 1024, 120.1}};

TEST(WgmmaShape, EstimateFollowsTheH200Measurements) {
  std::vector<double> ratios;
  for (const Measured& m : kH200) {
    const WgmmaCall c = call_27b(m.out_f, m.in, m.n);
    const WgmmaItemShape s = wgmma_shape_by_rows(c.out_f, c.n, c.sms);
    const LinearSplit sp = wgmma_split(c, s, true, LinearSplitRule::kProduction);
    const double ratio = wgmma_call_seconds(c, s, sp) * 1e6 / m.us;
    EXPECT_GT(ratio, 0.8) << m.out_f << "x" << m.in << " n=" << m.n << " " << name(s);
    EXPECT_LT(ratio, 1.25) << m.out_f << "x" << m.in << " n=" << m.n << " " << name(s);
    ratios.push_back(ratio);
  }
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  const double median = ratios[ratios.size() / 2];
  EXPECT_GT(median, 0.93);
  EXPECT_LT(median, 1.07);
}

struct Shape27b {
  int64_t out_f, in;
  bool narrow;  // fewer than 2 x 132 items of 128 rows at 64 tokens
};
constexpr Shape27b k27b[] = {{34816, 5120, false},  // gate|up
                             {16480, 5120, true},   // GDN in_proj
                             {14336, 5120, true},   // attention q|k|v
                             {5120, 17408, true},   // down
                             {5120, 6144, true}};   // out_proj, o_proj

TEST(WgmmaShape, CostRuleKeepsTheRowsRuleUpTo32Rows) {
  for (const Shape27b& m : k27b) {
    for (int64_t n = 4; n <= 32; ++n) {
      const WgmmaCall c = call_27b(m.out_f, m.in, n);
      const WgmmaItemShape rows = wgmma_shape_by_rows(c.out_f, n, c.sms);
      const WgmmaItemShape cost = wgmma_shape_by_cost(c, true, LinearSplitRule::kProduction);
      EXPECT_EQ(cost, rows) << m.out_f << "x" << m.in << " n=" << n << ": " << name(cost)
                            << " against " << name(rows);
    }
  }
}

TEST(WgmmaShape, CostRuleTakes128RowItemsOnTheNarrowMatricesAtVerifyRows) {
  for (const Shape27b& m : k27b) {
    for (const int64_t n : {96, 128}) {
      const WgmmaCall c = call_27b(m.out_f, m.in, n);
      const WgmmaItemShape cost = wgmma_shape_by_cost(c, true, LinearSplitRule::kProduction);
      EXPECT_EQ(cost, (WgmmaItemShape{128, 128})) << m.out_f << "x" << m.in << " n=" << n;
      const double t_rows =
          wgmma_call_seconds(c, wgmma_shape_by_rows(c.out_f, n, c.sms),
                             wgmma_split(c, wgmma_shape_by_rows(c.out_f, n, c.sms), true,
                                         LinearSplitRule::kProduction));
      const double t_cost =
          wgmma_call_seconds(c, cost, wgmma_split(c, cost, true, LinearSplitRule::kProduction));
      if (m.narrow) {
        EXPECT_LT(t_cost, 0.9 * t_rows) << m.out_f << "x" << m.in << " n=" << n;
      } else {
        EXPECT_EQ(t_cost, t_rows) << m.out_f << "x" << m.in << " n=" << n;
      }
    }
  }
  // 48-64 rows: out_f = 5120 in 128 x 64 items (80 rank units on 132 SMs instead of 160 on 264
  // slots, 28 SMs carrying two).
  for (const int64_t in : {17408, 6144}) {
    const WgmmaCall c = call_27b(5120, in, 64);
    EXPECT_EQ(wgmma_shape_by_cost(c, true, LinearSplitRule::kProduction), (WgmmaItemShape{128, 64}))
        << "5120x" << in;
  }
}

TEST(WgmmaShape, CostRulePicksABuiltShapeWithoutTheWorkspaceToo) {
  for (const Shape27b& m : k27b) {
    for (int64_t n = 4; n <= 2048; n += n < 64 ? 1 : 61) {
      const WgmmaCall c = call_27b(m.out_f, m.in, n);
      const WgmmaItemShape s = wgmma_shape_by_cost(c, false, LinearSplitRule::kProduction);
      EXPECT_TRUE(std::find(std::begin(kWgmmaItemShapes), std::end(kWgmmaItemShapes), s) !=
                  std::end(kWgmmaItemShapes))
          << name(s);
      EXPECT_LE(s.n, std::max<int64_t>(16, std::bit_ceil(static_cast<uint64_t>(n))));
    }
  }
}

// Production: the rows rule up to 64 rows (at 64 the cost rule's 128 x 64 items on out_f = 5120
// measured 3% slower), the cost rule above; variants 18 and 19 one rule throughout.
TEST(WgmmaShape, ProductionTakesTheRowsRuleUpTo64RowsAndTheCostRuleAbove) {
  for (const Shape27b& m : k27b) {
    for (int64_t n = 1; n <= 300; ++n) {
      const WgmmaCall c = call_27b(m.out_f, m.in, n);
      const WgmmaItemShape rows = wgmma_shape_by_rows(c.out_f, n, c.sms);
      const WgmmaItemShape cost = wgmma_shape_by_cost(c, true, LinearSplitRule::kProduction);
      const WgmmaItemShape prod = wgmma_shape(c, true, LinearSplitRule::kProduction);
      EXPECT_EQ(prod, n < kWgmmaCostRuleMinRows ? rows : cost)
          << m.out_f << "x" << m.in << " n=" << n;
      EXPECT_EQ(wgmma_shape(c, true, LinearSplitRule::kProduction, WgmmaShapeRule::kRows), rows);
      EXPECT_EQ(wgmma_shape(c, true, LinearSplitRule::kProduction, WgmmaShapeRule::kCost), cost);
    }
  }
  EXPECT_EQ(kWgmmaCostRuleMinRows, 65);
  const WgmmaCall down64 = call_27b(5120, 17408, 64);
  EXPECT_EQ(wgmma_shape(down64, true, LinearSplitRule::kProduction), (WgmmaItemShape{64, 64}));
}

// The cost rule's shapes as the H200 ran them (2026-12-05, kernel_bench linear_batch variant 18,
// 2173990): the estimate within the fit table's bounds, so the model predicted what it picked.
TEST(WgmmaShape, EstimateMatchesTheCostRulesShapesAsMeasured) {
  struct Measured {
    int64_t out_f, in, n;
    WgmmaItemShape shape;
    double us;
  };
  constexpr Measured kRun[] = {
      {16480, 5120, 128, {128, 128}, 47.9},  {14336, 5120, 128, {128, 128}, 45.2},
      {5120, 17408, 128, {128, 128}, 60.4},  {5120, 6144, 128, {128, 128}, 30.7},
      {5120, 17408, 256, {128, 128}, 118.2}, {5120, 6144, 256, {128, 128}, 49.9},
      {5120, 17408, 64, {128, 64}, 54.4},    {5120, 6144, 64, {128, 64}, 25.1}};
  for (const Measured& m : kRun) {
    const WgmmaCall c = call_27b(m.out_f, m.in, m.n);
    ASSERT_EQ(wgmma_shape_by_cost(c, true, LinearSplitRule::kProduction), m.shape)
        << m.out_f << "x" << m.in << " n=" << m.n;
    const double est =
        wgmma_call_seconds(c, m.shape, wgmma_split(c, m.shape, true, LinearSplitRule::kProduction));
    const double ratio = est / (m.us * 1e-6);
    EXPECT_GT(ratio, 0.8) << m.out_f << "x" << m.in << " n=" << m.n;
    EXPECT_LT(ratio, 1.25) << m.out_f << "x" << m.in << " n=" << m.n;
  }
}

}  // namespace
}  // namespace tandem::kernels
