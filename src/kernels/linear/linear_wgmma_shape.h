// Which item shape the wgmma decode linear (linear_wgmma_cuda.cu) runs a call in: 64 or 128
// weight rows x 16, 32, 64 or 128 tokens. The shape never changes a bit (every output is its
// row's decode-order sum whatever tile holds it; the tests check every shape), only the time, so
// two rules can pick it:
//  - by rows: 128 x 128 items where they fill the GPU twice over, 128-row items where they are
//    many, else 64-row items, the tokens per item the call's rows rounded up to 16, 32 or 64;
//  - by cost: the shape whose estimated time (wgmma_call_seconds) is the least, where it beats the
//    rows rule's shape by 5% or more.
// Production (wgmma_shape) takes the rows rule up to 64 rows and the cost rule above. Measured on
// the H200 (2026-12-05, kernel-bench-h200-2173990.json): at 128 rows the cost rule's
// shapes run in_proj 65.2 -> 47.9 us, q|k|v 58.6 -> 45.2, down 96.3 -> 60.4, out 38.5 -> 30.7
// (gate|up unchanged), at 256 rows down 144.8 -> 118.2; at 64 rows its 128 x 64 items on the
// out_f = 5120 matrices were 3% slower (down 53.0 -> 54.4, out 24.4 -> 25.1), so it starts above.
// The estimate models what bounds the kernel on the 27B shapes (docs/cuda.md, known gap 6): the
// weights' HBM stream, and per SM the operands' L2 -> shared memory traffic and the tensor cores,
// with the units (linear_split.h) dealt to a persistent grid in turn, block b on SM b % sms. It
// explains why 96-128 rows cost ~1.5x 64 rows on the narrow matrices (out_f 5120, and 16,480 /
// 14,336 rows at 64-row items): 64 x 64 units on 264 block slots leave some SMs twice the bytes
// of others, and the tokens are as many operand bytes as the weights.
// Host code, tested on the CPU (tests/kernels/linear_wgmma_shape_test.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/linear/linear_plan.h"
#include "kernels/linear/linear_split.h"

namespace tandem::kernels {

// tile_m weight rows (64: one consumer warpgroup, two blocks per SM; 128: two warpgroups, one
// block per SM) x n tokens.
struct WgmmaItemShape {
  int tile_m = 64, n = 16;
  constexpr int blocks_per_sm() const { return tile_m == 128 ? 1 : 2; }
  constexpr int consumers() const { return tile_m * 2; }  // 128 threads per 64 rows
  constexpr bool operator==(const WgmmaItemShape&) const = default;
};

// Every shape linear_wgmma_cuda.cu is built for.
inline constexpr WgmmaItemShape kWgmmaItemShapes[] = {{128, 16}, {128, 32}, {128, 64}, {128, 128},
                                                      {64, 16},  {64, 32},  {64, 64}};

// The rows rule (production).
constexpr WgmmaItemShape wgmma_shape_by_rows(int64_t out_f, int64_t n, int sms) {
  const int64_t items128 = (out_f + 127) / 128 * ((n + 63) / 64);
  if (n > 64 && items128 >= 2 * sms) return {128, 128};
  const int tile_m = items128 >= 2 * sms ? 128 : 64;
  return {tile_m, n > 32 ? 64 : n > 16 ? 32 : 16};
}

// A call: out_f weight rows of `in` k, n tokens, the plan (linear_plan.h), sms SMs.
struct WgmmaCall {
  int64_t out_f = 0, in = 0, n = 0;
  LinearPlan plan;
  int sms = 132;
};

// Items (row tile, token tile) of a call in a shape, and the block slots of one wave.
constexpr int wgmma_items(const WgmmaCall& c, WgmmaItemShape s) {
  return static_cast<int>((c.out_f + s.tile_m - 1) / s.tile_m * ((c.n + s.n - 1) / s.n));
}
constexpr int wgmma_slots(const WgmmaCall& c, WgmmaItemShape s) {
  return c.sms * s.blocks_per_sm();
}

// The split a call takes in a shape: linear_wgmma_cuda.cu's pick_split (none without the
// workspace).
inline LinearSplit wgmma_split(const WgmmaCall& c, WgmmaItemShape s, bool workspace,
                               LinearSplitRule rule) {
  const int items = wgmma_items(c, s);
  if (!workspace) return {items, 1, 1};
  const LinearSplitCall call{items, wgmma_slots(c, s), s.tile_m, int64_t{s.n / 2} * s.consumers(),
                             64};
  return pick_linear_split(call, c.plan, rule, kLinearSplitPostedFloats, kLinearSplitMaxItems);
}

// The estimate's rates, fitted to 014e446's kernel_bench linear_batch (the five 27B shapes at 8
// to 1,024 rows, each in the rows rule's shape: estimate / measured 0.84-1.19, median ~1.0;
// tests/kernels/linear_wgmma_shape_test.cpp keeps the table).
struct WgmmaCostRates {
  double hbm_bytes_per_s = 3.9e12;       // the weights, read once
  double sm_operand_bytes_per_s = 80e9;  // weights and tokens, L2 -> one SM's shared memory
  double sm_flop_per_s = 4.6e12;         // one SM's tensor cores in this kernel
  double launch_s = 2.5e-6;              // per call
  double split_s = 2e-6;                 // finish_split_kernel, when the call splits
};

// Operand bytes of the busiest SM when `units` units go to a grid of `grid` blocks in turn (block
// b: units b, b + grid, ...), block b on SM b % sms: units [0, whole) of whole_bytes each, the
// rest of split_bytes (<= whole_bytes: a split unit is one rank of a whole one). A block's bytes
// then never grow with its index, and SM 0 holds the lowest-numbered block of every round of
// `sms` blocks, so SM 0 is the busiest: only its blocks are summed (production calls this up to
// 7 times per decode linear call, on the host).
constexpr double wgmma_busiest_sm_bytes(int units, int whole, int grid, int sms, double whole_bytes,
                                        double split_bytes) {
  double bytes = 0;
  for (int b = 0; b < grid; b += sms) {
    const int all = b < units ? (units - 1 - b) / grid + 1 : 0;
    const int w = b < whole ? (whole - 1 - b) / grid + 1 : 0;
    bytes += w * whole_bytes + (all - w) * split_bytes;
  }
  return bytes;
}

// Estimated seconds of a call in shape s with split sp: the largest of the weights' HBM time and
// the busiest SM's operand and tensor-core times, plus the launches. A whole item is `in` k of
// tile_m weight rows and its tokens, a split unit one rank's range_k; units go to a grid of
// min(units, slots) blocks (wgmma_busiest_sm_bytes). Tokens per item: the call's rows spread over
// its token tiles (a partial tile's missing rows are not read).
inline double wgmma_call_seconds(const WgmmaCall& c, WgmmaItemShape s, const LinearSplit& sp,
                                 const WgmmaCostRates& r = {}) {
  const int items = wgmma_items(c, s);
  const int units = linear_split_units(items, sp);
  const int grid = std::min(units, wgmma_slots(c, s));
  const int64_t n_tiles = (c.n + s.n - 1) / s.n;
  const double tokens = static_cast<double>(c.n) / static_cast<double>(n_tiles);
  const double bytes_per_k = 2.0 * (s.tile_m + tokens);  // bf16 operands per k of a unit
  const double flop_per_byte = 2.0 * s.tile_m * s.n / bytes_per_k;
  const double busiest =
      wgmma_busiest_sm_bytes(units, sp.whole, grid, c.sms, bytes_per_k * static_cast<double>(c.in),
                             bytes_per_k * static_cast<double>(std::min(c.plan.range_k, c.in)));
  const double weights = 2.0 * static_cast<double>(c.out_f) * static_cast<double>(c.in);
  const double t = std::max({weights / r.hbm_bytes_per_s, busiest / r.sm_operand_bytes_per_s,
                             busiest * flop_per_byte / r.sm_flop_per_s});
  return t + r.launch_s + (sp.whole < items ? r.split_s : 0.0);
}

// The cost rule: among the shapes whose tokens per item are at most the call's rows rounded up to
// a power of two (at least 16), the one of least estimate, if it is 5% or more below the rows
// rule's shape's; else the rows rule's shape.
inline WgmmaItemShape wgmma_shape_by_cost(const WgmmaCall& c, bool workspace, LinearSplitRule rule,
                                          const WgmmaCostRates& r = {}) {
  const WgmmaItemShape by_rows = wgmma_shape_by_rows(c.out_f, c.n, c.sms);
  const auto cost = [&](WgmmaItemShape s) {
    return wgmma_call_seconds(c, s, wgmma_split(c, s, workspace, rule), r);
  };
  const int64_t max_n = std::max<int64_t>(16, std::bit_ceil(static_cast<uint64_t>(c.n)));
  WgmmaItemShape best = by_rows;
  double best_cost = cost(by_rows);
  const double bar = 0.95 * best_cost;
  for (const WgmmaItemShape& s : kWgmmaItemShapes) {
    if (s.n > max_n) continue;
    const double t = cost(s);
    if (t < bar && t < best_cost) best = s, best_cost = t;
  }
  return best;
}

// Which rule picks a call's shape: production (below), or one rule at every row count (bench
// variants 18: the cost rule, 19: the rows rule).
enum class WgmmaShapeRule { kProduction, kCost, kRows };
inline constexpr int64_t kWgmmaCostRuleMinRows = 65;

inline WgmmaItemShape wgmma_shape(const WgmmaCall& c, bool workspace, LinearSplitRule split,
                                  WgmmaShapeRule rule = WgmmaShapeRule::kProduction) {
  const bool by_cost = rule == WgmmaShapeRule::kCost ||
                       (rule == WgmmaShapeRule::kProduction && c.n >= kWgmmaCostRuleMinRows);
  return by_cost ? wgmma_shape_by_cost(c, workspace, split)
                 : wgmma_shape_by_rows(c.out_f, c.n, c.sms);
}

}  // namespace tandem::kernels
