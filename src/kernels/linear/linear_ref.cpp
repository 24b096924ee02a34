// CPU reference linear: every output element is ref::dot(x_row, w_row) — 8 fp32 lanes reduced in
// a fixed order — whatever the number of rows (row-invariant). Threads split output features.
// Up to 4 rows share each weight load (AVX2 when available); the lanes, the tail and the final
// reduction are exactly dot()'s, so results are bit-identical to it (tests/kernels checks this).
// The epilogues are y into `scratch`, then swiglu_ref over its pairs (kSwiGluPairs) or out += y
// (kAddToOut); with input_rms each row of y is scaled by its x row's inverse RMS first.
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/linear/linear.h"
#include "kernels/ref_common.h"
#include "kernels/swiglu/swiglu.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace tandem::kernels {

namespace {

#if defined(__AVX2__)
inline __m256 load8(const float* w) { return _mm256_loadu_ps(w); }
inline __m256 load8(const bf16* w) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
template <typename W>
constexpr bool kVectorised = std::is_same_v<W, float> || std::is_same_v<W, bf16>;
#else
template <typename W>
constexpr bool kVectorised = false;
#endif

// out[r] = dot(x[r], w, n) for R rows sharing one pass over w.
template <int R, typename W>
void dot_rows(const float* const* x, const W* w, int64_t n, float* const* out) {
#if defined(__AVX2__)
  if constexpr (kVectorised<W>) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 wv = load8(w + i);
      for (int r = 0; r < R; ++r)
        acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_loadu_ps(x[r] + i), wv));
    }
    for (int r = 0; r < R; ++r) {
      float a[8];
      _mm256_storeu_ps(a, acc[r]);
      for (int64_t j = i, l = 0; j < n; ++j, ++l) a[l] += x[r][j] * to_f32(w[j]);
      *out[r] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    }
    return;
  }
#endif
  for (int r = 0; r < R; ++r) *out[r] = ref::dot(x[r], w, n);
}

}  // namespace

void fold_rms_norm(Tensor& weight, const Tensor& norm, bool zero_centred) {
  TANDEM_CHECK(weight.device() == Device::kCpu && weight.is_contiguous() && weight.ndim() == 2 &&
                   norm.numel() == weight.dim(1),
               "fold_rms_norm: weight {} (host, contiguous [out, in]) and norm {} ([in]) disagree",
               weight.describe(), norm.describe());
  const Tensor g = norm.to_f32();
  const int64_t out_f = weight.dim(0), in = weight.dim(1);
  std::vector<float> scale(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) scale[i] = (zero_centred ? 1.f : 0.f) + g.data<const float>()[i];
  auto fold = [&](auto* w) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < out_f; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        auto& e = w[o * in + i];
        if constexpr (std::is_same_v<std::remove_reference_t<decltype(e)>, bf16>) {
          e = f32_to_bf16(bf16_to_f32(e) * scale[i]);
        } else {
          e = e * scale[i];
        }
      }
    }
  };
  if (weight.dtype() == DType::kBF16) return fold(weight.data<bf16>());
  TANDEM_CHECK(weight.dtype() == DType::kF32, "fold_rms_norm: weight {} must be bf16 or f32",
               weight.describe());
  fold(weight.data<float>());
}

void linear_ref(const LinearArgs& a, const ExecContext& ctx) {
  if (a.epilogue != LinearEpilogue::kNone) {
    a.epilogue == LinearEpilogue::kSwiGluPairs ? linear_expect_swiglu_pairs(a, "linear")
                                               : linear_expect_scratch(a, "linear");
    linear_ref({.x = a.x,
                .weight = a.weight,
                .out = a.scratch,
                .input_rms = a.input_rms,
                .input_rms_eps = a.input_rms_eps},
               ctx);
    if (a.epilogue == LinearEpilogue::kSwiGluPairs) {
      swiglu_ref({.out = a.out, .gate_up = a.scratch}, ctx);
      return;
    }
    ref::expect_f32_act(a.out, "linear.out");
    TANDEM_CHECK(a.out.shape() == a.scratch.shape(), "linear (add epilogue): out {} vs y {}",
                 a.out.describe(), a.scratch.describe());
    for (int64_t t = 0; t < a.out.dim(0); ++t) {
      float* o = a.out.data<float>() + t * a.out.stride(0);
      const float* y = a.scratch.data<const float>() + t * a.scratch.stride(0);
      for (int64_t f = 0; f < a.out.dim(1); ++f) o[f] += y[f];
    }
    return;
  }
  ref::expect_f32_act(a.x, "linear.x");
  ref::expect_f32_act(a.out, "linear.out");
  TANDEM_CHECK(a.weight.is_contiguous(), "linear: weight {} must be contiguous",
               a.weight.describe());
  const int64_t n_tokens = a.x.dim(0), in = a.x.dim(1), out_f = a.weight.dim(0);
  TANDEM_CHECK(a.weight.dim(1) == in && a.out.dim(0) == n_tokens && a.out.dim(1) == out_f,
               "linear: x {} weight {} out {} do not agree", a.x.describe(), a.weight.describe(),
               a.out.describe());
  const float* x = a.x.data<const float>();
  float* y = a.out.data<float>();
  const int64_t xs = a.x.stride(0), ys = a.out.stride(0);
  ref::with_weight_type(a.weight, [&](const auto* w) {
#pragma omp parallel for num_threads(ref::threads_for(ctx, out_f* in* n_tokens)) schedule(static)
    for (int64_t f = 0; f < out_f; ++f) {
      const auto* wf = w + f * in;
      for (int64_t t = 0; t < n_tokens; t += 4) {
        const float* xr[4] = {x + t * xs, x + (t + 1) * xs, x + (t + 2) * xs, x + (t + 3) * xs};
        float* yr[4] = {y + t * ys + f, y + (t + 1) * ys + f, y + (t + 2) * ys + f,
                        y + (t + 3) * ys + f};
        switch (std::min<int64_t>(4, n_tokens - t)) {
          case 4:
            dot_rows<4>(xr, wf, in, yr);
            break;
          case 3:
            dot_rows<3>(xr, wf, in, yr);
            break;
          case 2:
            dot_rows<2>(xr, wf, in, yr);
            break;
          default:
            dot_rows<1>(xr, wf, in, yr);
            break;
        }
      }
    }
  });
  if (!a.input_rms) return;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xr = x + t * xs;
    const float inv =
        1.f / std::sqrt(ref::dot(xr, xr, in) / static_cast<float>(in) + a.input_rms_eps);
    for (int64_t f = 0; f < out_f; ++f) y[t * ys + f] *= inv;
  }
}

}  // namespace tandem::kernels
