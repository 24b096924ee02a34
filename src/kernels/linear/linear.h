// Linear layer y = x W^T with fp32 accumulation, W in the PyTorch [out, in] layout.
// Row invariance (DESIGN.md inv. 2): every output element is one dot product computed by the same
// code in the same order whatever n_tokens is; any k-split is fixed by the weight shape alone.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct LinearArgs {
  Tensor x;       // act [n_tokens, in]   (row stride may exceed in; last dim contiguous)
  Tensor weight;  // bf16|f16|f32 [out, in], contiguous
  Tensor out;     // act or f32 [n_tokens, out] (row stride may exceed out)
};

void linear_ref(const LinearArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void linear_cuda(const LinearArgs& a, const ExecContext& ctx);
// Benchmark-only: picks a decode-kernel variant (0 = production); returns the number of variants.
int linear_skinny_set_variant(int v);
#endif

inline void linear(const LinearArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return linear_cuda(a, ctx);
#endif
  linear_ref(a, ctx);
}

}  // namespace tandem::kernels
