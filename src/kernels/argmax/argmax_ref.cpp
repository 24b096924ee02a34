// CPU reference argmax (lowest index wins ties; NaN never wins).
#include "kernels/argmax/argmax.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

int32_t ref::argmax_row(const float* l, int64_t vocab) {
  int32_t best = 0;
  float best_v = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) {
    if (l[v] > best_v) {
      best_v = l[v];
      best = static_cast<int32_t>(v);
    }
  }
  return best;
}

void argmax_ref(const ArgmaxArgs& a, const ExecContext& ctx) {
  TANDEM_CHECK(a.logits.dtype() == DType::kF32, "argmax: logits must be f32, got {}",
               a.logits.describe());
  for (int64_t t = 0; t < a.logits.dim(0); ++t)
    a.out.data<int32_t>()[t] =
        ref::argmax_row(a.logits.data<const float>() + t * a.logits.stride(0), a.logits.dim(1));
}

}  // namespace tandem::kernels
