// CPU reference argmax (lowest index wins ties; NaN never wins).
#include "kernels/argmax/argmax.h"
#include "kernels/ref_common.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace tandem::kernels {

int32_t ref::argmax_row(const float* l, int64_t vocab) {
  int32_t best = 0;
  float best_v = -INFINITY;
  int64_t v = 0;
#if defined(__AVX2__)
  // Lane i scans v = i (mod 8) with the same strict > (its first maximum wins; NaN never
  // compares greater), then the lanes' maxima are merged, the lowest index winning a tie: the
  // result is the scan's below, bit for bit.
  __m256 lane_v = _mm256_set1_ps(-INFINITY);
  __m256i lane_i = _mm256_setzero_si256();
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (; v + 8 <= vocab; v += 8) {
    const __m256 x = _mm256_loadu_ps(l + v);
    const __m256 gt = _mm256_cmp_ps(x, lane_v, _CMP_GT_OQ);
    lane_v = _mm256_blendv_ps(lane_v, x, gt);
    lane_i = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(lane_i), _mm256_castsi256_ps(idx), gt));
    idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
  }
  float vals[8];
  int32_t ids[8];
  _mm256_storeu_ps(vals, lane_v);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(ids), lane_i);
  for (int i = 0; i < 8; ++i)
    if (vals[i] > best_v || (vals[i] == best_v && ids[i] < best)) best_v = vals[i], best = ids[i];
#endif
  for (; v < vocab; ++v) {
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
