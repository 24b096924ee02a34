// The wgmma decode linear's units of work (linear_wgmma_cuda.cu): which items a call runs whole,
// which it splits over blocks (split mode), and what each unit covers. Items are (row tile, token
// tile) pairs; a whole item walks every rank and class of the decode order (linear_plan.h), a
// split one is cut into `parts` units of one rank each, its classes in `cgroups` groups, whose sums
// a second kernel adds in the decode order. Host code with constexpr pieces the kernel also calls,
// tested on the CPU (tests/kernels/linear_split_test.cpp).
#pragma once

#include <cstdint>

#include "kernels/linear/linear_plan.h"

namespace tandem::kernels {

constexpr int kLinearClasses = static_cast<int>(kLinearPlanChunkK / kPieceK);  // 8
// The workspace's room for posted sums, in floats (64 MB; the 27B shapes need up to 42), and the
// most split items a call may have (fewer than a wave of block slots): what production passes to
// pick_linear_split.
constexpr int64_t kLinearSplitPostedFloats = int64_t{16} << 20;
constexpr int64_t kLinearSplitMaxItems = 4096;

// Items [0, whole) are one unit each; every later item is `parts` units (plan.splits x cgroups).
struct LinearSplit {
  int whole = 0, parts = 1, cgroups = 1;
};

// What unit u covers: ranks [r0, r1) and classes [c0, c1) of each, of item `item`; split is the
// item's index among the split ones (its posted sums' place), -1 for a whole item.
struct LinearUnit {
  int item = 0, split = -1, r0 = 0, r1 = 0, c0 = 0, c1 = 0;
};

constexpr int linear_split_units(int items, const LinearSplit& s) {
  return s.whole + (items - s.whole) * s.parts;
}

constexpr LinearUnit linear_split_unit(const LinearSplit& s, int splits, int u) {
  LinearUnit w;
  if (u < s.whole) {
    w.item = u, w.split = -1;
    w.r0 = 0, w.r1 = splits, w.c0 = 0, w.c1 = kLinearClasses;
    return w;
  }
  const int v = u - s.whole, part = v % s.parts, per = kLinearClasses / s.cgroups;
  w.split = v / s.parts, w.item = s.whole + w.split;
  w.r0 = part / s.cgroups, w.r1 = w.r0 + 1;
  w.c0 = part % s.cgroups * per, w.c1 = w.c0 + per;
  return w;
}

// Sums a split item posts: one per rank, or one per class of each rank with class groups.
constexpr int64_t linear_split_pieces(int splits, int cgroups) {
  return int64_t{splits} * (cgroups > 1 ? kLinearClasses : 1);
}

// Where split item `split` posts its sum of rank r, class c (ignored without class groups), in
// posted sums: the workspace's layout, [split item][rank][piece], which finish_split_kernel reads
// in order.
constexpr int64_t linear_split_piece(int split, int r, int c, int splits, int cgroups) {
  return int64_t{split} * linear_split_pieces(splits, cgroups) +
         (cgroups > 1 ? int64_t{r} * kLinearClasses + c : r);
}

// kProduction: whole waves of items first (one per block slot each), then the items left over
// (all of them when they are fewer than the slots) split into one unit per rank (plan.splits > 1)
// when they are fewer than the slots, or when that shortens the last wave by a tenth or more:
// ceil(rest splits / slots) / splits item-times, longer by the posted sums' traffic; and only if
// the posted sums fit `capacity` floats. At 5-32 rows too (gate|up's 8 items left after two
// waves): back to back the whole items ran 2-6 us faster (H200 kernel benches), but in the 27B
// step, not splitting them was 0.49 / 0.23 / 0.14 ms slower at 8 / 16 / 32 streams (H100,
// docs/benchmarks-history.md "Twenty-first session"). kBefore (bench variant 15): only calls of
// fewer items than slots split. kClassGroups (bench variant 16): ranks' classes in groups too, the
// group count with the shortest last wave (2d1a1e4's rule: 0.6-0.9x the ranks-only split's speed on
// out_f = 5120 at 5-64 rows).
enum class LinearSplitRule { kProduction, kBefore, kClassGroups };

struct LinearSplitCall {
  int items = 0, slots = 0;
  int64_t tile_rows = 0;     // weight rows per item
  int64_t piece_floats = 0;  // floats of one posted sum (accumulators x consumer threads)
  int64_t stage_k = 64;      // k per ring stage: a class group has at least 4
};

inline LinearSplit pick_linear_split(const LinearSplitCall& c, const LinearPlan& plan,
                                     LinearSplitRule rule, int64_t capacity,
                                     int64_t max_split_items) {
  LinearSplit none{c.items, 1, 1};
  const int whole = c.items / c.slots * c.slots, rest = c.items - whole;
  if (rest == 0 || rest > max_split_items) return none;
  // The last wave of the rest in `parts` units each (in item-times), longer by the posted sums'
  // bytes, written and read, over an item's weight bytes.
  const auto last_wave = [&](int64_t parts, int cg) {
    const double posted = 2.0 * static_cast<double>(linear_split_pieces(plan.splits, cg)) *
                          static_cast<double>(c.piece_floats) * 4.0 /
                          (2.0 * static_cast<double>(c.tile_rows * plan.range_k * plan.splits));
    return static_cast<double>((rest * parts + c.slots - 1) / c.slots) /
           static_cast<double>(parts) * (1.0 + posted);
  };
  const auto fits = [&](int cg) {
    return int64_t{rest} * linear_split_pieces(plan.splits, cg) * c.piece_floats <= capacity;
  };
  if (rule != LinearSplitRule::kClassGroups) {
    if (plan.splits == 1 || !fits(1)) return none;
    if (whole > 0 && (rule == LinearSplitRule::kBefore || last_wave(plan.splits, 1) >= 0.9))
      return none;
    return {whole, plan.splits, 1};
  }
  LinearSplit best_split = none;
  double best = 0.9;  // the unsplit rest's wave, less a tenth
  for (int cg = 1; cg <= kLinearClasses; cg *= 2) {
    const int64_t parts = int64_t{plan.splits} * cg;
    if (parts == 1) continue;
    if (plan.range_k < 4 * c.stage_k * cg || !fits(cg)) break;
    const double wave = last_wave(parts, cg);
    if (wave < best) best = wave, best_split = {whole, static_cast<int>(parts), cg};
  }
  return best_split;
}

}  // namespace tandem::kernels
