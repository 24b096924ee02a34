// Out-of-line parts of ref_common.h.
#include "kernels/ref_common.h"

namespace tandem::kernels::ref {

float load_f32(const Tensor& t, int64_t i) {
  return with_weight_type(t, [&](const auto* p) { return to_f32(p[i]); });
}

}  // namespace tandem::kernels::ref
