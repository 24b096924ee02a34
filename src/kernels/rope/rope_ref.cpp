// CPU reference for partial NeoX RoPE; frequencies computed in fp32 as transformers does.
#include <cmath>
#include <vector>

#include "kernels/ref_common.h"
#include "kernels/rope/rope.h"

namespace tandem::kernels {

void rope_ref(const RopeArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.x, "rope.x");
  const int64_t n = a.x.dim(0), heads = a.x.dim(1), half = a.rotary_dim / 2;
  TANDEM_CHECK(a.rotary_dim % 2 == 0 && a.rotary_dim <= a.x.dim(2),
               "rope: rotary_dim {} must be even and <= head_dim {}", a.rotary_dim, a.x.dim(2));
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(a.rotary_dim);
    inv_freq[i] = 1.f / std::pow(a.theta, exponent);
  }
  const int32_t* pos = a.positions.data<const int32_t>();
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos[t]) * inv_freq[i];
      const float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float* x = a.x.data<float>() + t * a.x.stride(0) + h * a.x.stride(1);
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
      }
    }
  }
}

}  // namespace tandem::kernels
