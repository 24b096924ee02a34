// Depthwise causal conv1d + SiLU over the GDN channels [q | k | v] of a batch of sequences, each
// with its conv history in one slot of a pool. The history carries the speculative semantics of
// DESIGN.md invariant 3 (section 4; reference section 3.3). Per sequence s, rows x_0 .. x_{T-1},
// with o = n_acc[s] and H = history[slot[s]]:
//   window = H[:, o : o + Kc - 1]          the Kc - 1 raw inputs before the sequence's first row
//   y[t, c] = silu( sum_j w[c, j] * seq[t + j, c] ),   seq = [window, x_0 .. x_{T-1}]
//   kSpec:    H[:, 0 : Kc - 1 + T] = seq   (decode/verify; in place)
//   kCompact: H[:, 0 : Kc - 1] = the last Kc - 1 of seq   (a prefill chunk)
// n_acc is what the last commit left: the number of the last step's rows that were accepted
// (1..T after a verify step, so the next window starts right after the last accepted input), and 0
// after a prefill chunk (whose history is already compact). A plain decode step is kSpec with
// T = 1; there is one read rule and no rollback. Padding rows of a sequence (a graph bucket's
// filler drafts) are written but never read: the next window ends at row n_acc - 1.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"
#include "kernels/seq_layout.h"

namespace tandem::kernels {

enum class ConvHistoryMode { kSpec, kCompact };

struct Conv1dArgs {
  Tensor x;        // act [n_rows, channels] raw projection (row stride may exceed channels)
  Tensor weight;   // bf16|f16|f32 [channels, 1, kernel] as in the checkpoint
  Tensor history;  // act [n_slots, channels, hist_len], hist_len >= kernel - 1 + rows of a step
  Tensor out;      // act [n_rows, channels]
  SeqLayout seqs;
  Tensor slot;   // i32 [n_seqs]: the history slot of each sequence
  Tensor n_acc;  // i32 [n_seqs]: window offset, 0..hist_len - kernel + 1
  ConvHistoryMode mode = ConvHistoryMode::kSpec;
};

void conv1d_ref(const Conv1dArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void conv1d_cuda(const Conv1dArgs& a, const ExecContext& ctx);
// kSpec calls of at least n sequences with kernel size 4 and a history of 4..12 entries take a
// kernel of 8 channels a thread (16-byte accesses; the same bits). Default 32: on the H100 the
// 27B step at 32 / 64 streams gains 0.12 / 0.25 ms (0.25 / 0.24 beside the GDN row pairs), at 8
// streams it loses 0.26 ms to the scalar kernel (docs/cuda.md, gap 10). kConvVectorNever: off.
// Returns the previous value.
inline constexpr int64_t kConvVectorNever = INT64_MAX;
int64_t conv1d_set_vector_min_seqs(int64_t n);
int64_t conv1d_vector_calls();  // calls that took that kernel since start-up (tests)
#endif

inline void conv1d(const Conv1dArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return conv1d_cuda(a, ctx);
#endif
  conv1d_ref(a, ctx);
}

}  // namespace tandem::kernels
