// CPU reference linear: every output element is ref::dot(x_row, w_row) — 8 fp32 FMA lanes reduced
// in a fixed order — whatever the number of rows (row-invariant). Threads split output features.
// The AVX2 + FMA path computes exactly dot()'s lanes, tail and reduction, so its results are
// bit-identical to it (tests/kernels/vector_paths_test.cpp checks every row count and weight
// type); it only changes which loads are shared. A register tile holds R rows x F features, one
// accumulator of 8 k-lanes per output, and loads each x and each weight vector once per 8 k for
// the whole tile; bf16 and f16 weights widen to f32 in registers (exact). The tile covers all rows
// of a decode call (1 x 8 up to 8 x 1, so the weights stream once, in order) and 3 x 4 pieces of a
// prefill call, whose features go in blocks small enough to stay in L1 across the row tiles.
// The epilogues: y goes into `scratch`, then each thread runs swiglu_ref over its own whole pair
// groups (kSwiGluPairs) or out += y over its own features (kAddToOut). With input_rms each row of
// y is scaled by its x row's inverse RMS first.
// FP8 weights (f8_e4m3 with block scales): each thread dequantises its features in blocks of rows
// into an f32 scratch (w * scale, one fp32 multiply per element, the specification of linear.h) and
// runs the f32 product above on it, so every output is dot(x row, dequantised weight row) bit for
// bit, with the same row invariance, whatever the scale layout (128-row blocks, or the 8-row groups
// of an interleaved gate|up).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/linear/linear.h"
#include "kernels/ref_common.h"
#include "kernels/swiglu/swiglu.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TANDEM_LINEAR_AVX2 1
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tandem::kernels {

namespace {

#ifdef TANDEM_LINEAR_AVX2
constexpr int kTileRows = 8;  // rows of a register tile (dot_rows picks its features)

inline __m256 load8(const float* w) { return _mm256_loadu_ps(w); }
inline __m256 load8(const f16* w) {  // f16 -> f32 is exact (F16C)
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
}
// bf16 -> f32 puts the 16 bits in the high half of the word (exact). The 8 bf16 are broadcast to
// both 128-bit halves (a pure load) and one byte shuffle moves element j of its half into the
// high half of word j, zeroing the low half: no shift, so the FMA ports stay free.
inline __m256 load8(const bf16* w) {
  const __m256i h =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  const __m256i to_high =
      _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7, -1, -1, 8, 9, -1, -1,
                       10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
  return _mm256_castsi256_ps(_mm256_shuffle_epi8(h, to_high));
}
// Lanes [0, rem) of a partial block of 8; the other lanes are 0 (they are blended away).
template <typename W>
inline __m256 load_tail(const W* w, int64_t rem) {
  float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t l = 0; l < rem; ++l) t[l] = to_f32(w[l]);
  return _mm256_loadu_ps(t);
}

// dot()'s reduction ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) of four accumulators at
// once: hadd pairs neighbouring lanes within each 128-bit half, so two rounds leave (l0..l3) sums
// in the low half and (l4..l7) sums in the high half; one add joins them (a + b == b + a exactly).
inline __m128 reduce4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
inline float reduce1(__m256 v) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v, v), v);
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

// y[r][f] = dot(x[r], w[f], n) for an R x F tile: lane l of acc[r][f] accumulates with FMA over
// i = l (mod 8) in increasing i, as dot() does, so the tile shape never changes a result.
// y[r] points at row r's output for feature 0 of the tile (the F features are contiguous).
// Accumulator I is (row I / F, feature I % F); the pack expansions spell the R x F FMAs out (GCC
// 12 keeps a loop-indexed accumulator array in memory at -O3, storing it every iteration); the
// repeated x and w loads of an expansion are one load each after CSE.
template <int R, int F, typename W, size_t... I>
inline void dot_tile_impl(const float* const* x, const W* const* w, int64_t n, float* const* y,
                          std::index_sequence<I...>) {
  __m256 acc[R * F] = {(static_cast<void>(I), _mm256_setzero_ps())...};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    ((acc[I] = _mm256_fmadd_ps(_mm256_loadu_ps(x[I / F] + i), load8(w[I % F] + i), acc[I])), ...);
  }
  if (i < n) {  // dot()'s tail: lanes [0, n - i) take one more term, the others keep theirs
    const int64_t rem = n - i;
    const __m256 keep = _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7),
                                      _mm256_set1_ps(static_cast<float>(rem)), _CMP_LT_OQ);
    ((acc[I] = _mm256_blendv_ps(
          acc[I],
          _mm256_fmadd_ps(load_tail(x[I / F] + i, rem), load_tail(w[I % F] + i, rem), acc[I]),
          keep)),
     ...);
  }
  if constexpr (F % 4 == 0) {  // four features of a row at once: one contiguous store
    for (int r = 0; r < R; ++r)
      for (int f = 0; f < F; f += 4)
        _mm_storeu_ps(y[r] + f, reduce4(acc[r * F + f], acc[r * F + f + 1], acc[r * F + f + 2],
                                        acc[r * F + f + 3]));
  } else {  // four rows of a feature at once
    for (int f = 0; f < F; ++f) {
      int r = 0;
      for (; r + 4 <= R; r += 4) {
        float out[4];
        _mm_storeu_ps(out, reduce4(acc[r * F + f], acc[(r + 1) * F + f], acc[(r + 2) * F + f],
                                   acc[(r + 3) * F + f]));
        for (int k = 0; k < 4; ++k) y[r + k][f] = out[k];
      }
      for (; r < R; ++r) y[r][f] = reduce1(acc[r * F + f]);
    }
  }
}

template <int R, int F, typename W>
inline void dot_tile(const float* const* x, const W* const* w, int64_t n, float* const* y) {
  dot_tile_impl<R, F>(x, w, n, y, std::make_index_sequence<R * F>());
}

// Features [f0, f1) of R rows (x[r], outputs at y[r]): tiles of F features, then one at a time.
template <int R, int F, typename W>
void tile_features(const float* const* x, const W* w, int64_t in, float* const* y, int64_t f0,
                   int64_t f1) {
  int64_t f = f0;
  const W* wr[F];
  float* yr[R];
  for (; f + F <= f1; f += F) {
    for (int j = 0; j < F; ++j) wr[j] = w + (f + j) * in;
    for (int r = 0; r < R; ++r) yr[r] = y[r] + f;
    dot_tile<R, F>(x, wr, in, yr);
  }
  for (; f < f1; ++f) {
    wr[0] = w + f * in;
    for (int r = 0; r < R; ++r) yr[r] = y[r] + f;
    dot_tile<R, 1>(x, wr, in, yr);
  }
}

// One row tile of nr <= kTileRows rows x features [f0, f1). The tile shape keeps 8 to 14
// accumulator chains in flight (FMA latency x throughput) and loads each weight vector once for
// all nr rows: 1 row x 8 features ... 8 rows x 1 feature. Every shape computes dot()'s arithmetic.
template <typename W>
void dot_rows(const float* const* x, int64_t nr, const W* w, int64_t in, float* const* y,
              int64_t f0, int64_t f1) {
  switch (nr) {
    case 1:
      return tile_features<1, 8>(x, w, in, y, f0, f1);
    case 2:
      return tile_features<2, 4>(x, w, in, y, f0, f1);
    case 3:
      return tile_features<3, 4>(x, w, in, y, f0, f1);
    case 4:
      return tile_features<4, 2>(x, w, in, y, f0, f1);
    case 5:
      return tile_features<5, 2>(x, w, in, y, f0, f1);
    case 6:
      return tile_features<6, 2>(x, w, in, y, f0, f1);
    case 7:
      return tile_features<7, 2>(x, w, in, y, f0, f1);
    default:
      return tile_features<8, 1>(x, w, in, y, f0, f1);
  }
}

// Rows [0, n_rows) x features [f0, f1) of y = x W^T (W row f at w + f * in). Features go in
// blocks whose weight rows (~16 KB) stay in L1 while every row tile of kTileRows rows reads them.
template <typename W>
void dot_block(const float* x, int64_t xs, const W* w, int64_t in, float* y, int64_t ys,
               int64_t n_rows, int64_t f0, int64_t f1) {
  const int64_t block = std::max<int64_t>(8, (16 << 10) / (in * sizeof(W)) / 8 * 8);
  // Up to 8 rows (decode): all rows in one tile, so the weights stream once, in order. More
  // (prefill): tiles of 3 rows x 4 features, the best register tile once weights sit in L1.
  const int64_t tile_rows = n_rows <= kTileRows ? n_rows : 3;
  for (int64_t b0 = f0; b0 < f1; b0 += block) {
    const int64_t b1 = std::min(f1, b0 + block);
    for (int64_t t = 0; t < n_rows; t += tile_rows) {
      const int64_t nr = std::min<int64_t>(tile_rows, n_rows - t);
      const float* xr[kTileRows];
      float* yr[kTileRows];
      for (int64_t r = 0; r < nr; ++r) {
        xr[r] = x + (t + r) * xs;
        yr[r] = y + (t + r) * ys;
      }
      dot_rows(xr, nr, w, in, yr, b0, b1);
    }
  }
}
#endif  // TANDEM_LINEAR_AVX2

// The epilogue-free product y[t, f] = dot(x[t], w[f], in) for features [f0, f1) of every row.
template <typename W>
void linear_range(const float* x, int64_t xs, const W* w, int64_t in, float* y, int64_t ys,
                  int64_t n_rows, int64_t f0, int64_t f1) {
#ifdef TANDEM_LINEAR_AVX2
  dot_block(x, xs, w, in, y, ys, n_rows, f0, f1);
#else
  for (int64_t t = 0; t < n_rows; ++t)
    for (int64_t f = f0; f < f1; ++f) y[t * ys + f] = ref::dot(x + t * xs, w + f * in, in);
#endif
}

#ifdef TANDEM_LINEAR_AVX2
// 8 e4m3 codes as f32, exactly f8e4m3_to_f32's values (bits included: NaN codes give its quiet
// NaN): normal codes by moving exponent and mantissa into place (exponent bias 7 -> 127), the
// subnormal ones (exponent 0) as m 2^-9. Arithmetic instead of a table gather, which is slow on
// CPUs with the gather data-sampling mitigation.
inline __m256 e4m3x8(const uint8_t* w) {
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w)));
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
  __m256 v = _mm256_castsi256_ps(
      _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23)));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(7))),
                                   _mm256_set1_ps(0x1p-9f));
  v = _mm256_blendv_ps(v, sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag)));
  v = _mm256_or_ps(
      v, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24)));
  const __m256 nan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
  return _mm256_blendv_ps(v, nan,
                          _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f))));
}
#endif

// linear_range for an FP8 weight: blocks of rows (~64 KB of f32) dequantised, then multiplied.
void linear_range_fp8(const float* x, int64_t xs, const f8e4m3* w, const float* scale,
                      int64_t block_rows, int64_t in, float* y, int64_t ys, int64_t n_rows,
                      int64_t f0, int64_t f1) {
  thread_local std::vector<float> buf;
  const int64_t block = std::max<int64_t>(8, (64 << 10) / (in * 4) / 8 * 8);
  for (int64_t b0 = f0; b0 < f1; b0 += block) {
    const int64_t b1 = std::min(f1, b0 + block);
    buf.resize(static_cast<size_t>((b1 - b0) * in));
    fp8_dequantize_rows(w, scale, block_rows, in, b0, b1, buf.data());
    linear_range(x, xs, buf.data(), in, y + b0, ys, n_rows, 0, b1 - b0);
  }
}

}  // namespace

void fp8_dequantize_rows(const f8e4m3* w, const float* scale, int64_t block_rows, int64_t in,
                         int64_t f0, int64_t f1, float* out) {
  const int64_t kb = (in + kFp8BlockCols - 1) / kFp8BlockCols;
  for (int64_t f = f0; f < f1; ++f) {
    const f8e4m3* wr = w + f * in;
    const float* sr = scale + (f / block_rows) * kb;
    float* o = out + (f - f0) * in;
    for (int64_t c0 = 0; c0 < in; c0 += kFp8BlockCols) {
      const int64_t c1 = std::min(in, c0 + kFp8BlockCols);
      const float s = sr[c0 / kFp8BlockCols];
      int64_t i = c0;
#ifdef TANDEM_LINEAR_AVX2
      const __m256 vs = _mm256_set1_ps(s);
      for (; i + 8 <= c1; i += 8)  // the same values and the same multiply, 8 at a time
        _mm256_storeu_ps(o + i, _mm256_mul_ps(e4m3x8(&wr[i].bits), vs));
#endif
      for (; i < c1; ++i) o[i] = f8e4m3_to_f32(wr[i]) * s;
    }
  }
}

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
  const bool swiglu = a.epilogue == LinearEpilogue::kSwiGluPairs;
  if (a.epilogue != LinearEpilogue::kNone) {
    swiglu ? linear_expect_swiglu_pairs(a, "linear") : linear_expect_scratch(a, "linear");
    ref::expect_f32_act(a.scratch, "linear.scratch");
  }
  // y: out itself, or scratch when an epilogue follows.
  const Tensor& yt = a.epilogue == LinearEpilogue::kNone ? a.out : a.scratch;
  ref::expect_f32_act(a.x, "linear.x");
  ref::expect_f32_act(a.out, "linear.out");
  TANDEM_CHECK(a.weight.is_contiguous(), "linear: weight {} must be contiguous",
               a.weight.describe());
  const int64_t n_tokens = a.x.dim(0), in = a.x.dim(1), out_f = a.weight.dim(0);
  TANDEM_CHECK(a.weight.dim(1) == in && yt.dim(0) == n_tokens && yt.dim(1) == out_f,
               "linear: x {} weight {} y {} do not agree", a.x.describe(), a.weight.describe(),
               yt.describe());
  const bool fp8 = a.weight.dtype() == DType::kF8E4M3;
  TANDEM_CHECK(a.weight_fold.raw() == nullptr,
               "linear: weight_fold {} is for FP8 weights on CUDA (the CPU loader does not fold "
               "norms)",
               a.weight_fold.describe());
  if (fp8) linear_expect_fp8_scales(a, "linear");
  if (swiglu) {
    TANDEM_CHECK(a.out.dim(0) == n_tokens && a.out.dim(1) == out_f / 2,
                 "linear (swiglu epilogue): out {} must be [n_tokens={}, {}]", a.out.describe(),
                 n_tokens, out_f / 2);
  } else if (a.epilogue == LinearEpilogue::kAddToOut) {
    TANDEM_CHECK(a.out.shape() == a.scratch.shape(), "linear (add epilogue): out {} vs y {}",
                 a.out.describe(), a.scratch.describe());
  }
  const float* x = a.x.data<const float>();
  float* y = yt.data<float>();
  const int64_t xs = a.x.stride(0), ys = yt.stride(0);
  // Inverse RMS of each x row (input_rms), computed before any thread scales its features.
  std::vector<float> inv_rms;
  if (a.input_rms) {
    inv_rms.resize(static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xr = x + t * xs;
      inv_rms[t] = 1.f / std::sqrt(ref::dot(xr, xr, in) / static_cast<float>(in) + a.input_rms_eps);
    }
  }
  // Features are split between threads in whole units (4-feature tiles, or SwiGLU pair groups of
  // 2 kSwigluPairGroup rows so that each thread applies the epilogue to its own features).
  const int64_t unit = swiglu ? 2 * kSwigluPairGroup : 4;
  const int64_t n_units = (out_f + unit - 1) / unit;
  const int n_threads =
      static_cast<int>(std::min<int64_t>(ref::threads_for(ctx, out_f * in * n_tokens), n_units));
  auto run = [&](const auto* w) {
#pragma omp parallel num_threads(n_threads)
    {
#ifdef _OPENMP
      const int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
#else
      const int64_t id = 0, nt = 1;
#endif
      const int64_t f0 = std::min(out_f, n_units * id / nt * unit);
      const int64_t f1 = std::min(out_f, n_units * (id + 1) / nt * unit);
      if (f0 < f1) {
        if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(w)>>,
                                     f8e4m3>) {
          linear_range_fp8(x, xs, w, a.weight_scale_inv.data<const float>(), a.scale_block_rows, in,
                           y, ys, n_tokens, f0, f1);
        } else {
          linear_range(x, xs, w, in, y, ys, n_tokens, f0, f1);
        }
        for (int64_t t = 0; a.input_rms && t < n_tokens; ++t)
          for (int64_t f = f0; f < f1; ++f) y[t * ys + f] *= inv_rms[t];
        if (swiglu) {  // this thread's whole pair groups: columns [f0, f1) of y -> [f0/2, f1/2)
          swiglu_ref({.out = a.out.slice(1, f0 / 2, f1 / 2), .gate_up = yt.slice(1, f0, f1)}, ctx);
        } else if (a.epilogue == LinearEpilogue::kAddToOut) {
          for (int64_t t = 0; t < n_tokens; ++t) {
            float* o = a.out.data<float>() + t * a.out.stride(0);
            for (int64_t f = f0; f < f1; ++f) o[f] += y[t * ys + f];
          }
        }
      }
    }
  };
  if (fp8) return run(a.weight.data<const f8e4m3>());
  ref::with_weight_type(a.weight, run);
}

std::string linear_paths(Device device) {
#ifdef TANDEM_CUDA
  if (device == Device::kCuda) return linear_cuda_paths();
#endif
  (void)device;
#ifdef TANDEM_LINEAR_AVX2
  return "linear: fp32 dot products of 8 FMA lanes in AVX2 register tiles (all rows of a decode "
         "call in one tile, 3 x 4 tiles beyond 8 rows), features split between threads";
#else
  return "linear: fp32 dot products of 8 lanes, scalar, features split between threads";
#endif
}

#ifndef TANDEM_CUDA
void linear_reserve_fp8_scratch(int64_t /*numel*/, Device /*device*/) {}
void linear_reserve_decode_workspace(Device /*device*/) {}
void linear_reserve_prefill_gemms(Device /*device*/, bool /*fp8*/) {}
#endif

}  // namespace tandem::kernels
