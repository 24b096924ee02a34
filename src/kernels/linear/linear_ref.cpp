// CPU reference linear: one fixed-order dot product per output element (row-invariant), threads
// across output features. Rows are the inner loop so a weight row stays in L1 across tokens.
#include "kernels/linear/linear.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

void linear_ref(const LinearArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.x, "linear.x");
  ref::expect_f32_act(a.out, "linear.out");
  TANDEM_CHECK(a.weight.is_contiguous(), "linear: weight {} must be contiguous", a.weight.describe());
  const int64_t n_tokens = a.x.dim(0), in = a.x.dim(1), out_f = a.weight.dim(0);
  TANDEM_CHECK(a.weight.dim(1) == in && a.out.dim(0) == n_tokens && a.out.dim(1) == out_f,
               "linear: x {} weight {} out {} do not agree", a.x.describe(), a.weight.describe(),
               a.out.describe());
  const float* x = a.x.data<const float>();
  float* y = a.out.data<float>();
  const int64_t xs = a.x.stride(0), ys = a.out.stride(0);
  ref::with_weight_type(a.weight, [&](const auto* w) {
#pragma omp parallel for num_threads(ref::threads_for(ctx, out_f * in * n_tokens)) schedule(static)
    for (int64_t f = 0; f < out_f; ++f) {
      const auto* wf = w + f * in;
      for (int64_t t = 0; t < n_tokens; ++t) y[t * ys + f] = ref::dot(x + t * xs, wf, in);
    }
  });
}

}  // namespace tandem::kernels
