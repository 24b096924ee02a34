// Depthwise causal conv1d + SiLU over the GDN channels [q | k | v], with a conv history that
// carries the speculative semantics (DESIGN.md section 4, reference section 3.3):
//   o = n_acc - 1;  window = history[:, o : o + Kc - 1]
//   y[t, c] = silu( sum_j w[c, j] * seq[t + j, c] ),  seq = [window, x_0 .. x_{T-1}]
//   kSpec:    history[:, 0 : Kc - 2 + T] = window[:, 1:] ++ x      (in place; T <= hist_len-Kc+2)
//   kCompact: history[:, 0 : Kc - 1] = last Kc-1 of [window, x]     (prefill; next n_acc is 1)
// A plain decode step is kSpec with T = 1 and n_acc = 1: there is one read rule and no rollback.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

enum class ConvHistoryMode { kSpec, kCompact };

struct Conv1dArgs {
  Tensor x;        // act [n_tokens, channels] raw projection (row stride may exceed channels)
  Tensor weight;   // bf16|f16|f32 [channels, 1, kernel] as in the checkpoint
  Tensor history;  // act [channels, hist_len], hist_len = kernel - 1 + k_max
  Tensor n_acc;    // i32 [1]: accepted tokens of the last step (1 after prefill or plain decode)
  Tensor out;      // act [n_tokens, channels]
  ConvHistoryMode mode = ConvHistoryMode::kSpec;
};

void conv1d_ref(const Conv1dArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void conv1d_cuda(const Conv1dArgs& a, const ExecContext& ctx);
#endif

inline void conv1d(const Conv1dArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return conv1d_cuda(a, ctx);
#endif
  conv1d_ref(a, ctx);
}

}  // namespace tandem::kernels
