// CPU reference for the depthwise causal conv1d + SiLU with a speculative conv history.
#include <vector>

#include "kernels/conv1d/conv1d.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

void conv1d_ref(const Conv1dArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.x, "conv1d.x");
  ref::expect_f32_act(a.out, "conv1d.out");
  ref::expect_f32_act(a.history, "conv1d.history");
  const int64_t n = a.x.dim(0), channels = a.x.dim(1), kernel = a.weight.dim(-1);
  const int64_t hist_len = a.history.dim(1), window = kernel - 1;
  const int32_t o = a.n_acc.data<const int32_t>()[0] - 1;
  TANDEM_CHECK(a.weight.numel() == channels * kernel && a.history.dim(0) == channels,
               "conv1d: x {} weight {} history {} do not agree", a.x.describe(),
               a.weight.describe(), a.history.describe());
  TANDEM_CHECK(o >= 0 && o + window <= hist_len, "conv1d: n_acc {} outside [1, {}]", o + 1,
               hist_len - window + 1);
  TANDEM_CHECK(a.mode == ConvHistoryMode::kCompact || window - 1 + n <= hist_len,
               "conv1d: {} tokens do not fit a spec history of length {}", n, hist_len);
  ref::with_weight_type(a.weight, [&](const auto* w) {
    for (int64_t c = 0; c < channels; ++c) {
      float* hist = a.history.data<float>() + c * a.history.stride(0);
      std::vector<float> seq(window + n);  // [window, x_0 .. x_{n-1}]
      for (int64_t j = 0; j < window; ++j) seq[j] = hist[o + j];
      for (int64_t t = 0; t < n; ++t)
        seq[window + t] = a.x.data<const float>()[t * a.x.stride(0) + c];
      const auto* wc = w + c * kernel;
      for (int64_t t = 0; t < n; ++t) {
        float acc = 0.f;
        for (int64_t j = 0; j < kernel; ++j) acc += to_f32(wc[j]) * seq[t + j];
        a.out.data<float>()[t * a.out.stride(0) + c] = ref::silu(acc);
      }
      if (a.mode == ConvHistoryMode::kSpec) {
        for (int64_t j = 0; j + 1 < window + n; ++j) hist[j] = seq[j + 1];
      } else {
        for (int64_t j = 0; j < window; ++j) hist[j] = seq[n + j];
      }
    }
  });
}

}  // namespace tandem::kernels
