// Helpers shared by the CPU reference kernels: typed weight access, the fixed-order dot product
// that makes every reference kernel row-invariant, the reference's exp (and silu, sigmoid) with
// 8-lane versions of the same bits, an FMA rank update, and aligned per-thread scratch. The
// reference computes activations in f32 only; weights may be bf16, f16 or f32.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/exec_context.h"
#include "core/tensor.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace tandem::kernels::ref {

// Threads for a parallel loop of `work` multiply-adds: small loops stay on one thread, since
// waking a team costs more than they do (the split is across outputs, so results never change).
inline int threads_for(const ExecContext& ctx, int64_t work) {
  return work < (int64_t{1} << 18) ? 1 : ctx.n_threads;
}

// e^x, the reference's exponential: Cephes expf (S. Moshier), about 1 ulp. x = n ln 2 + r with
// |r| <= ln 2 / 2 (ln 2 in two parts, so r is exact to fp32), e^r = 1 + r + r^2 P(r) with P of
// degree 5, then the scaling by 2^n as two exact power-of-two products (n = 128 does not fit one
// exponent field). Written out instead of std::exp so that exp8 below, the same operations on 8
// lanes, gives the same bits; every step is one correctly rounded fp32 operation.
// Out of range: NaN stays NaN, x >= 88.7228394 gives +inf, x < -87.3365479 gives 0 (the
// subnormal range is flushed).
inline float pow2i(int32_t n) {  // 2^n for n in [-126, 127], exactly
  return std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
}
inline float exp(float x) {
  if (!(x < 88.7228394f)) return x != x ? x : INFINITY;
  if (x < -87.3365479f) return 0.f;
  const float n = std::nearbyint(x * 1.44269504f);  // round to nearest even
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float y = std::fma(p, r * r, r) + 1.f;
  const int32_t ni = static_cast<int32_t>(n), half = ni >> 1;  // floor(n / 2)
  return (y * pow2i(half)) * pow2i(ni - half);
}

inline float silu(float x) { return x / (1.f + exp(-x)); }
inline float sigmoid(float x) { return 1.f / (1.f + exp(-x)); }
inline float softplus(float x) { return x > 20.f ? x : std::log1p(exp(x)); }

// Calls fn(const T* data) with the tensor's element type for float weight tensors.
template <typename Fn>
decltype(auto) with_weight_type(const Tensor& w, Fn&& fn) {
  switch (w.dtype()) {
    case DType::kF32:
      return fn(w.data<const float>());
    case DType::kBF16:
      return fn(w.data<const bf16>());
    case DType::kF16:
      return fn(w.data<const f16>());
    default:
      fail("weight tensor {}: expected bf16, f16 or f32", w.describe());
  }
}

// Reads element i of a small contiguous float vector (norm weights, A_log, dt_bias) as f32.
float load_f32(const Tensor& t, int64_t i);

// Dot product with 8 independent fp32 partial sums reduced in a fixed order. Lane l accumulates
// x[i] w[i] for i = l, l + 8, l + 16, ... (and the tail i = 8 floor(n / 8) + l), in increasing i,
// each step one fused multiply-add (std::fma: one rounding, so an FMA vector lane computes the
// same bits); then ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). The order depends only on n,
// never on which row or how many rows are being computed. This is the specification of every
// output element of linear (the blocked kernels in linear_ref.cpp are tested bitwise against it).
template <typename W>
inline float dot(const float* x, const W* w, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(x[i + l], to_f32(w[i + l]), acc[l]);
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] = std::fma(x[i], to_f32(w[i]), acc[l]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Float scratch aligned to 64 bytes that only grows: per-thread working memory of the reference
// kernels (thread_local), so a hot loop allocates nothing in steady state and its vectors never
// straddle cache lines. Contents are unspecified after a growing get().
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer();
  float* get(int64_t n);

 private:
  float* p_ = nullptr;
  int64_t cap_ = 0;
};

// dot(x, y, n) for f32 vectors, bit for bit (one AVX2 accumulator holds dot()'s 8 lanes).
float dot_f32(const float* x, const float* y, int64_t n);

// out[r] = dot_f32(x, y[r], n) for r < 8, bit for bit (8 FMA chains in flight at once).
void dot8_f32(const float* x, const float* const* y, int64_t n, float* out);

// C[m, j] = fma(A(m, p), B[p, j], C[m, j]) for p = 0, 1, .., P - 1 in order, for every m < M and
// j < N: each element of C is one FMA chain over p, started from C's old value. A(m, p) is
// a[m * a_m + p * a_p] (any strides, so A may be read transposed), row p of B starts at
// b + p * ldb and row m of C at c + m * ldc (unit column stride). The AVX2 path (ref_common.cpp)
// tiles C in 4 x 16 blocks of accumulators; every element still runs exactly this chain, so the
// result does not depend on the tiling, on M or on where a row sits.
void fma_rank_update(float* c, int64_t ldc, const float* a, int64_t a_m, int64_t a_p,
                     const float* b, int64_t ldb, int64_t M, int64_t P, int64_t N);

inline void expect_f32_act(const Tensor& t, const char* what) {
  TANDEM_CHECK(t.dtype() == DType::kF32 && t.device() == Device::kCpu,
               "reference kernel: {} must be f32 on cpu, got {}", what, t.describe());
  TANDEM_CHECK(t.ndim() == 0 || t.stride(-1) == 1,
               "reference kernel: {} must have a contiguous last dim, got strides {}", what,
               shape_str(t.strides()));
}

#if defined(__AVX2__) && defined(__FMA__)
// exp, silu and sigmoid on 8 lanes: the operations of the scalar versions above, lane by lane,
// so each lane has the bits the scalar function gives.
inline __m256 exp8(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.f));
  const __m256i ni = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(ni, 1);
  auto pow2 = [](__m256i e) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
  };
  __m256 out = _mm256_mul_ps(_mm256_mul_ps(y, pow2(half)), pow2(_mm256_sub_epi32(ni, half)));
  const __m256 low = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3365479f), _CMP_LT_OQ);
  const __m256 high = _mm256_cmp_ps(x, _mm256_set1_ps(88.7228394f), _CMP_NLT_UQ);  // or NaN
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  out = _mm256_andnot_ps(low, out);
  out = _mm256_blendv_ps(out, _mm256_set1_ps(INFINITY), high);
  return _mm256_blendv_ps(out, x, nan);
}
inline __m256 silu8(__m256 x) {
  const __m256 e = exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.f)));  // -x
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e));
}
inline __m256 sigmoid8(__m256 x) {
  const __m256 e = exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.f)));  // -x
  return _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_add_ps(_mm256_set1_ps(1.f), e));
}
#endif

// y[i] = silu(x[i]) for i < n (8 lanes at a time where AVX2 is built; the same bits).
void silu_rows(const float* x, float* y, int64_t n);

}  // namespace tandem::kernels::ref
