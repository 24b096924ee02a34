// CPU reference argmax (lowest index wins ties; NaN never wins).
#include "kernels/argmax/argmax.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

void argmax_ref(const ArgmaxArgs& a, const ExecContext& ctx) {
  TANDEM_CHECK(a.logits.dtype() == DType::kF32, "argmax: logits must be f32, got {}",
               a.logits.describe());
  const int64_t n = a.logits.dim(0), vocab = a.logits.dim(1);
  for (int64_t t = 0; t < n; ++t) {
    const float* l = a.logits.data<const float>() + t * a.logits.stride(0);
    int32_t best = 0;
    float best_v = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) {
      if (l[v] > best_v) {
        best_v = l[v];
        best = static_cast<int32_t>(v);
      }
    }
    a.out.data<int32_t>()[t] = best;
  }
}

}  // namespace tandem::kernels
