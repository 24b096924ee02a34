// The FP8 order's walk of an item's ranks (linear_fp8_wgmma_cuda.cu; the order is
// linear_fp8_common.cuh's): per rank r in [r0, r1), whose range is k0 = r range_k .. min(in,
// k0 + range_k), class 0's units (64 k each, at k0 + c 64 + j 512 inside the range) in increasing
// k, then class 1's, ... class 7's, each class followed by end_class(c) (also a class without
// units), each rank by end_rank(r). fp8_walk_units is that loop; Fp8Walk is the same walk as a
// cursor, for a consumer that prepares the next unit before it folds the current one. constexpr:
// the kernel calls it (--expt-relaxed-constexpr) and tests/kernels/linear_fp8_walk_test.cpp
// checks on the CPU that the cursor gives the loop's sequence of units and ends.
#pragma once

#include <cstdint>

namespace tandem::kernels {

constexpr int kFp8WalkClasses = 8;       // the FP8 kernels' consumer warps
constexpr int64_t kFp8WalkUnitK = 64;    // k per unit
constexpr int64_t kFp8WalkGroupK = 512;  // a class's next unit is this much further

template <class Stage, class EndClass, class EndRank>
constexpr void fp8_walk_units(int64_t in, int64_t range_k, int r0, int r1, Stage&& stage,
                              EndClass&& end_class, EndRank&& end_rank) {
  for (int r = r0; r < r1; ++r) {
    const int64_t k0 = r * range_k, len = (in < k0 + range_k ? in : k0 + range_k) - k0;
    for (int c = 0; c < kFp8WalkClasses; ++c) {
      for (int64_t off = int64_t{c} * kFp8WalkUnitK; off < len; off += kFp8WalkGroupK) {
        stage(k0 + off);
      }
      end_class(c);
    }
    end_rank(r);
  }
}

// The same units, four classes at a time (the wgmma kernel's opt-in quad stages): per rank, pass q
// takes classes 4q .. 4q + 3 together, a 256-k stage at k0 + 4q 64 + j 512 (j = 0, 1, ...) whose
// unit i (k + 64 i, class 4q + i) lies inside the range for i < valid; stage(k, valid), then
// end_class(4q), ..., end_class(4q + 3); end_rank(r) after both passes. Each class's units come in
// increasing k and the ends in the loop's order, so a consumer that keeps four class sums folds
// exactly what fp8_walk_units folds (tests/kernels/linear_fp8_walk_test.cpp).
constexpr int kFp8WalkQuad = 4;
template <class Stage, class EndClass, class EndRank>
constexpr void fp8_walk_quads(int64_t in, int64_t range_k, int r0, int r1, Stage&& stage,
                              EndClass&& end_class, EndRank&& end_rank) {
  for (int r = r0; r < r1; ++r) {
    const int64_t k0 = r * range_k, len = (in < k0 + range_k ? in : k0 + range_k) - k0;
    for (int q = 0; q < kFp8WalkClasses / kFp8WalkQuad; ++q) {
      for (int64_t off = int64_t{q} * kFp8WalkQuad * kFp8WalkUnitK; off < len;
           off += kFp8WalkGroupK) {
        const int64_t left = (len - off + kFp8WalkUnitK - 1) / kFp8WalkUnitK;
        stage(k0 + off, static_cast<int>(left < kFp8WalkQuad ? left : kFp8WalkQuad));
      }
      for (int i = 0; i < kFp8WalkQuad; ++i) end_class(q * kFp8WalkQuad + i);
    }
    end_rank(r);
  }
}

// The walk as a cursor: start it with fp8_walk_start, then fp8_walk_settle brings it to its next
// unit (k()), calling the ends the loop has on the way; after a unit, add kFp8WalkGroupK to off
// and settle again. settle returns false at the end (after the last end_rank).
struct Fp8Walk {
  int r, r1, c;
  int64_t in, range_k, k0, len, off;  // the rank's first k and length; the unit at k0 + off
  constexpr int64_t k() const { return k0 + off; }
};

constexpr void fp8_walk_rank(Fp8Walk& w) {
  w.k0 = w.r * w.range_k;
  w.len = (w.in < w.k0 + w.range_k ? w.in : w.k0 + w.range_k) - w.k0;
  w.c = 0;
  w.off = 0;
}

constexpr Fp8Walk fp8_walk_start(int64_t in, int64_t range_k, int r0, int r1) {
  Fp8Walk w{r0, r1, 0, in, range_k, 0, 0, 0};
  if (w.r < w.r1) fp8_walk_rank(w);
  return w;
}

template <class EndClass, class EndRank>
constexpr bool fp8_walk_settle(Fp8Walk& w, EndClass&& end_class, EndRank&& end_rank) {
  while (w.r < w.r1) {
    while (w.c < kFp8WalkClasses) {
      if (w.off < w.len) return true;
      end_class(w.c);
      ++w.c;
      w.off = int64_t{w.c} * kFp8WalkUnitK;
    }
    end_rank(w.r);
    ++w.r;
    if (w.r < w.r1) fp8_walk_rank(w);
  }
  return false;
}

}  // namespace tandem::kernels
