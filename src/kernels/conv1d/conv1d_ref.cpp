// CPU reference for the depthwise causal conv1d + SiLU with a speculative conv history per slot.
#include <algorithm>

#include "kernels/conv1d/conv1d.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

void conv1d_ref(const Conv1dArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.x, "conv1d.x");
  ref::expect_f32_act(a.out, "conv1d.out");
  ref::expect_f32_act(a.history, "conv1d.history");
  expect_seq_layout(a.seqs, "conv1d");
  expect_per_seq(a.slot, a.seqs, "conv1d", "slot");
  expect_per_seq(a.n_acc, a.seqs, "conv1d", "n_acc");
  const int64_t channels = a.x.dim(1), kernel = a.weight.dim(-1);
  const int64_t n_slots = a.history.dim(0), hist_len = a.history.dim(2), window = kernel - 1;
  TANDEM_CHECK(a.weight.numel() == channels * kernel && a.history.dim(1) == channels &&
                   a.history.is_contiguous(),
               "conv1d: x {} weight {} history {} do not agree", a.x.describe(),
               a.weight.describe(), a.history.describe());
  const int32_t* row_start = a.seqs.row_start.data<const int32_t>();
  for (int64_t s = 0; s < a.seqs.n_seqs; ++s) {
    const int64_t n = row_start[s + 1] - row_start[s];
    const int32_t slot = a.slot.data<const int32_t>()[s], o = a.n_acc.data<const int32_t>()[s];
    TANDEM_CHECK(slot >= 0 && slot < n_slots, "conv1d: sequence {} slot {} outside [0, {})", s,
                 slot, n_slots);
    TANDEM_CHECK(o >= 0 && o + window <= hist_len, "conv1d: sequence {} n_acc {} outside [0, {}]",
                 s, o, hist_len - window);
    TANDEM_CHECK(a.mode == ConvHistoryMode::kCompact || window + n <= hist_len,
                 "conv1d: sequence {} has {} rows, more than a history of {} keeps", s, n,
                 hist_len);
  }
  // Tasks of (sequence, block of kBlock channels); each channel is computed alone, so threads
  // split channels and results do not depend on the split.
  constexpr int64_t kBlock = 64;
  const int64_t n_blocks = (channels + kBlock - 1) / kBlock;
  const int64_t n_tasks = a.seqs.n_seqs * n_blocks;
  const int64_t rows = a.seqs.n_seqs > 0 ? row_start[a.seqs.n_seqs] - row_start[0] : 0;
  ref::with_weight_type(a.weight, [&](const auto* w) {
#pragma omp parallel for num_threads(ref::threads_for(ctx, 64 * rows * channels)) schedule(static)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t s = task / n_blocks, c0 = task % n_blocks * kBlock;
      const int64_t c1 = std::min(channels, c0 + kBlock);
      const int64_t r0 = row_start[s], n = row_start[s + 1] - r0;
      const int32_t slot = a.slot.data<const int32_t>()[s], o = a.n_acc.data<const int32_t>()[s];
      // The block in time-major layout: seq[u][c - c0] for u over [window, x_0 .. x_{n-1}] and
      // the block's taps wt[j][c - c0], so that the sums below run over contiguous channels.
      const int64_t nc = c1 - c0, len = window + n;
      thread_local ref::ScratchBuffer buf;
      float* seq = buf.get((len + kernel + n) * kBlock);
      float* wt = seq + len * kBlock;
      float* pre = wt + kernel * kBlock;  // the sums [n, kBlock], then silu in rows
      for (int64_t c = c0; c < c1; ++c) {
        const float* hist = a.history.data<const float>() + (slot * channels + c) * hist_len;
        for (int64_t j = 0; j < window; ++j) seq[j * kBlock + (c - c0)] = hist[o + j];
        for (int64_t j = 0; j < kernel; ++j) wt[j * kBlock + (c - c0)] = to_f32(w[c * kernel + j]);
      }
      for (int64_t t = 0; t < n; ++t)
        std::copy_n(a.x.data<const float>() + (r0 + t) * a.x.stride(0) + c0, nc,
                    seq + (window + t) * kBlock);
      // y[t, c] before silu: acc = sum_j w[c, j] seq[t + j, c], j in order (mul, then add).
      for (int64_t t = 0; t < n; ++t) {
        float* acc = pre + t * kBlock;
        std::fill_n(acc, nc, 0.f);
        for (int64_t j = 0; j < kernel; ++j) {
          const float* sj = seq + (t + j) * kBlock;
          const float* wj = wt + j * kBlock;
          for (int64_t c = 0; c < nc; ++c) acc[c] += wj[c] * sj[c];
        }
      }
      // The new history: kSpec keeps all of seq, kCompact its last window entries.
      const int64_t keep0 = a.mode == ConvHistoryMode::kSpec ? 0 : n;
      const int64_t keep = a.mode == ConvHistoryMode::kSpec ? len : window;
      for (int64_t c = c0; c < c1; ++c) {
        float* hist = a.history.data<float>() + (slot * channels + c) * hist_len;
        for (int64_t j = 0; j < keep; ++j) hist[j] = seq[(keep0 + j) * kBlock + (c - c0)];
      }
      for (int64_t t = 0; t < n; ++t)  // y = silu(sum), contiguous over the block's channels
        ref::silu_rows(pre + t * kBlock, a.out.data<float>() + (r0 + t) * a.out.stride(0) + c0,
                       c1 - c0);
    }
  });
}

}  // namespace tandem::kernels
