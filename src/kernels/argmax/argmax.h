// Greedy token choice: out[t] = argmax_v logits[t, v]; ties go to the lowest index; NaN never wins.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct ArgmaxArgs {
  Tensor logits;  // f32 [n_tokens, vocab] (row stride may exceed vocab)
  Tensor out;     // i32 [n_tokens]
};

void argmax_ref(const ArgmaxArgs& a, const ExecContext& ctx);
namespace ref {
int32_t argmax_row(const float* logits, int64_t vocab);  // one row, same rule as argmax_ref
}  // namespace ref
#ifdef TANDEM_CUDA
void argmax_cuda(const ArgmaxArgs& a, const ExecContext& ctx);
#endif

inline void argmax(const ArgmaxArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return argmax_cuda(a, ctx);
#endif
  argmax_ref(a, ctx);
}

}  // namespace tandem::kernels
