// CPU reference SwiGLU.
#include "kernels/ref_common.h"
#include "kernels/swiglu/swiglu.h"

namespace tandem::kernels {

void swiglu_ref(const SwigluArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.gate, "swiglu.gate");
  ref::expect_f32_act(a.up, "swiglu.up");
  ref::expect_f32_act(a.out, "swiglu.out");
  const int64_t n = a.gate.dim(0), m = a.gate.dim(1);
  for (int64_t t = 0; t < n; ++t) {
    const float* g = a.gate.data<const float>() + t * a.gate.stride(0);
    const float* u = a.up.data<const float>() + t * a.up.stride(0);
    float* o = a.out.data<float>() + t * a.out.stride(0);
    for (int64_t i = 0; i < m; ++i) o[i] = ref::silu(g[i]) * u[i];
  }
}

}  // namespace tandem::kernels
