// The FP8 order's walk of an item's ranks (linear_fp8_wgmma_cuda.cu; the order is
// linear_fp8_common.cuh's): per rank r in [r0, r1), whose range is k0 = r range_k .. min(in,
// k0 + range_k), class 0's units (64 k each, at k0 + c 64 + j 512 inside the range) in increasing
// k, then class 1's, ... class 7's, each class followed by end_class(c) (also a class without
// units), each rank by end_rank(r). fp8_walk_units is that loop (the 64-token items');
// fp8_walk_quads takes the same units four classes a pass (the 32-token items'). constexpr: the
// kernel calls them (--expt-relaxed-constexpr) and tests/kernels/linear_fp8_walk_test.cpp checks
// on the CPU that the quads give each class the loop's units and the loop's ends.
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

// The same units, four classes at a time (the wgmma kernel's quad stages): per rank, pass q
// takes classes 4q .. 4q + 3 together, a 256-k stage at k0 + 4q 64 + j 512 (j = 0, 1, ...) whose
// unit i (k + 64 i, class 4q + i) lies inside the range for i < valid; stage(k, valid), then
// end_class(4q), ..., end_class(4q + 3); end_rank(r) after both passes. Each class's units come in
// increasing k and the ends in the loop's order, so a consumer that keeps four class sums folds
// exactly what fp8_walk_units folds (tests/kernels/linear_fp8_walk_test.cpp).
// Passes [q0, q1) only (a class half: pass 0 or pass 1 of every rank; the quad kernel's half
// units): the same stages and class ends as the whole walk has for those passes, and every rank's
// end.
constexpr int kFp8WalkQuad = 4;
constexpr int kFp8WalkPasses = kFp8WalkClasses / kFp8WalkQuad;
template <class Stage, class EndClass, class EndRank>
constexpr void fp8_walk_quads(int64_t in, int64_t range_k, int r0, int r1, Stage&& stage,
                              EndClass&& end_class, EndRank&& end_rank, int q0 = 0,
                              int q1 = kFp8WalkPasses) {
  for (int r = r0; r < r1; ++r) {
    const int64_t k0 = r * range_k, len = (in < k0 + range_k ? in : k0 + range_k) - k0;
    for (int q = q0; q < q1; ++q) {
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

}  // namespace tandem::kernels
