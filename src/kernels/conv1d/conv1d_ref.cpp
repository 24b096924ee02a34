// CPU reference for the depthwise causal conv1d + SiLU with a speculative conv history per slot.
#include <vector>

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
    const int64_t r0 = row_start[s], n = row_start[s + 1] - r0;
    const int32_t slot = a.slot.data<const int32_t>()[s], o = a.n_acc.data<const int32_t>()[s];
    TANDEM_CHECK(slot >= 0 && slot < n_slots, "conv1d: sequence {} slot {} outside [0, {})", s,
                 slot, n_slots);
    TANDEM_CHECK(o >= 0 && o + window <= hist_len, "conv1d: sequence {} n_acc {} outside [0, {}]",
                 s, o, hist_len - window);
    TANDEM_CHECK(a.mode == ConvHistoryMode::kCompact || window + n <= hist_len,
                 "conv1d: sequence {} has {} rows, more than a history of {} keeps", s, n,
                 hist_len);
    ref::with_weight_type(a.weight, [&](const auto* w) {
      for (int64_t c = 0; c < channels; ++c) {
        float* hist = a.history.data<float>() + (slot * channels + c) * hist_len;
        std::vector<float> seq(window + n);  // [window, x_0 .. x_{n-1}]
        for (int64_t j = 0; j < window; ++j) seq[j] = hist[o + j];
        for (int64_t t = 0; t < n; ++t)
          seq[window + t] = a.x.data<const float>()[(r0 + t) * a.x.stride(0) + c];
        const auto* wc = w + c * kernel;
        for (int64_t t = 0; t < n; ++t) {
          float acc = 0.f;
          for (int64_t j = 0; j < kernel; ++j) acc += to_f32(wc[j]) * seq[t + j];
          a.out.data<float>()[(r0 + t) * a.out.stride(0) + c] = ref::silu(acc);
        }
        if (a.mode == ConvHistoryMode::kSpec) {
          for (int64_t j = 0; j < window + n; ++j) hist[j] = seq[j];
        } else {
          for (int64_t j = 0; j < window; ++j) hist[j] = seq[n + j];
        }
      }
    });
  }
}

}  // namespace tandem::kernels
