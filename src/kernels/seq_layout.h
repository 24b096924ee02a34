// The sequences of one batched launch (DESIGN.md section 4). A step's activations are one tensor
// of rows; the rows of sequence s are [row_start[s], row_start[s + 1]), consecutive positions in
// order. Ops that need a sequence (attention, conv1d, gated delta rule) take a SeqLayout and the
// per-sequence arrays they read ([n_seqs] i32 on the op's device, filled by the host before the
// step: invariant 5); row-wise ops (linear, norms, embedding, argmax) just take the rows.
// Row indices are absolute: a sub-batch (the verify sequences of a step, or its prefill chunks) is
// a slice of the per-sequence arrays over the same row tensors, and an op touches only the rows of
// its sequences. A sequence may have zero rows.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tandem::kernels {

struct SeqLayout {
  int64_t n_seqs = 0;    // sequences in the launch (host; for a captured graph, the bucket's)
  int64_t max_rows = 0;  // host: an upper bound on any sequence's rows (grid sizes)
  Tensor row_start;      // i32 [n_seqs + 1] on the op's device

  // Sequences [begin, end) of this layout (row indices stay absolute).
  SeqLayout slice(int64_t begin, int64_t end) const {
    return {end - begin, max_rows, row_start.slice(0, begin, end + 1)};
  }
};

// Host-side shape checks shared by the per-sequence ops: row_start covers n_seqs + 1 entries and
// every per-sequence array at least n_seqs.
inline void expect_seq_layout(const SeqLayout& s, const char* op) {
  TANDEM_CHECK(s.n_seqs >= 0 && s.row_start.ndim() == 1 && s.row_start.dim(0) == s.n_seqs + 1 &&
                   s.row_start.dtype() == DType::kI32,
               "{}: row_start must be i32 [n_seqs + 1 = {}], got {}", op, s.n_seqs + 1,
               s.row_start.describe());
}
inline void expect_per_seq(const Tensor& t, const SeqLayout& s, const char* op, const char* name) {
  TANDEM_CHECK(t.dtype() == DType::kI32 && t.ndim() >= 1 && t.dim(0) >= s.n_seqs &&
                   (t.ndim() == 1 || t.stride(-1) == 1),
               "{}: {} must be i32 with at least n_seqs = {} rows, got {}", op, name, s.n_seqs,
               t.describe());
}

}  // namespace tandem::kernels
