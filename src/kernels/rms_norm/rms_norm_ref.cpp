// CPU reference for (fused residual) RMSNorm, zero-centred or plain.
#include "kernels/ref_common.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"

namespace tandem::kernels {

namespace {

// Views a [rows, dim] or [rows, heads, dim] tensor as (row, head) -> pointer.
struct Rows {
  float* base;
  int64_t n_rows, n_heads, dim, row_stride, head_stride;
  explicit Rows(const Tensor& t)
      : base(t.data<float>()),
        n_rows(t.dim(0)),
        n_heads(t.ndim() == 3 ? t.dim(1) : 1),
        dim(t.dim(-1)),
        row_stride(t.stride(0)),
        head_stride(t.ndim() == 3 ? t.stride(1) : 0) {}
  float* at(int64_t r, int64_t h) const { return base + r * row_stride + h * head_stride; }
};

}  // namespace

void rms_norm_ref(const RmsNormArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.x, "rms_norm.x");
  ref::expect_f32_act(a.out, "rms_norm.out");
  TANDEM_CHECK(a.x.shape() == a.out.shape(), "rms_norm: x {} and out {} differ", a.x.describe(),
               a.out.describe());
  const bool fused = a.residual.raw() != nullptr;
  if (fused) ref::expect_f32_act(a.residual, "rms_norm.residual");
  const Rows x(a.x), out(a.out);
  const Rows res = fused ? Rows(a.residual) : x;
  const int64_t dim = x.dim;
  TANDEM_CHECK(a.weight.numel() == dim, "rms_norm: weight {} does not match dim {}",
               a.weight.describe(), dim);
  ref::with_weight_type(a.weight, [&](const auto* w) {
    for (int64_t r = 0; r < x.n_rows; ++r) {
      for (int64_t h = 0; h < x.n_heads; ++h) {
        const float* src = x.at(r, h);
        float* acc = res.at(r, h);
        if (fused) {
          for (int64_t i = 0; i < dim; ++i) acc[i] += src[i];
          src = acc;
        }
        float ss = 0.f;
        for (int64_t i = 0; i < dim; ++i) ss += src[i] * src[i];
        const float inv = 1.f / std::sqrt(ss / static_cast<float>(dim) + a.eps);
        float* o = out.at(r, h);
        for (int64_t i = 0; i < dim; ++i) {
          const float wi = a.zero_centred ? 1.f + to_f32(w[i]) : to_f32(w[i]);
          o[i] = (src[i] * inv) * wi;
        }
      }
    }
  });
  if (a.rope_dim > 0) rope_ref({a.out, a.rope_positions, a.rope_dim, a.rope_theta}, ctx);
}

}  // namespace tandem::kernels
