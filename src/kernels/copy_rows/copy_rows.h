// Row gather/scatter by index: out[dst[i], :] = in[src[i], :] for i < n, rows of the same width
// and dtype (last dim contiguous, row strides free). The MTP drafter moves a step's hidden rows
// into per-sequence queues and back with it, one launch for every sequence of the step.
// Indices are read on the device (graph-safe); rows listed twice in dst get one of the copies.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct CopyRowsArgs {
  Tensor in;   // [rows_in, width]
  Tensor out;  // [rows_out, width], same dtype as in
  Tensor src;  // i32 [n]: rows of in
  Tensor dst;  // i32 [n]: rows of out
};

void copy_rows_ref(const CopyRowsArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void copy_rows_cuda(const CopyRowsArgs& a, const ExecContext& ctx);
#endif

inline void copy_rows(const CopyRowsArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return copy_rows_cuda(a, ctx);
#endif
  copy_rows_ref(a, ctx);
}

// Shape rules shared by both devices.
inline void copy_rows_expect(const CopyRowsArgs& a) {
  TANDEM_CHECK(a.in.ndim() == 2 && a.out.ndim() == 2 && a.in.dim(1) == a.out.dim(1) &&
                   a.in.dtype() == a.out.dtype() && a.in.stride(1) == 1 && a.out.stride(1) == 1,
               "copy_rows: in {} and out {} must be 2-D rows of one width and dtype",
               a.in.describe(), a.out.describe());
  TANDEM_CHECK(
      a.src.dtype() == DType::kI32 && a.dst.dtype() == DType::kI32 && a.src.dim(0) == a.dst.dim(0),
      "copy_rows: src {} and dst {} must be i32 of one length", a.src.describe(), a.dst.describe());
}

}  // namespace tandem::kernels
