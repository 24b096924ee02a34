// CPU reference for the GDN gated RMSNorm (plain weight, silu(z) gate after the norm).
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

void gated_rms_norm_ref(const GatedRmsNormArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.o, "gated_rms_norm.o");
  ref::expect_f32_act(a.z, "gated_rms_norm.z");
  ref::expect_f32_act(a.out, "gated_rms_norm.out");
  const int64_t n = a.o.dim(0), heads = a.o.dim(1), dv = a.o.dim(2);
  TANDEM_CHECK(a.weight.numel() == dv, "gated_rms_norm: weight {} does not match d_v {}",
               a.weight.describe(), dv);
  thread_local ref::ScratchBuffer scratch;
  float* gate = scratch.get(dv);  // silu(z) of one row and head
  ref::with_weight_type(a.weight, [&](const auto* w) {
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const float* o = a.o.data<float>() + t * a.o.stride(0) + h * a.o.stride(1);
        const float* z = a.z.data<float>() + t * a.z.stride(0) + h * a.z.stride(1);
        float* y = a.out.data<float>() + t * a.out.stride(0) + h * a.out.stride(1);
        float ss = 0.f;
        for (int64_t i = 0; i < dv; ++i) ss += o[i] * o[i];
        const float inv = 1.f / std::sqrt(ss / static_cast<float>(dv) + a.eps);
        ref::silu_rows(z, gate, dv);
        for (int64_t i = 0; i < dv; ++i) y[i] = ((o[i] * inv) * to_f32(w[i])) * gate[i];
      }
    }
  });
}

}  // namespace tandem::kernels
