// Out-of-line parts of ref_common.h: load_f32 and the FMA rank update (scalar statement first;
// the AVX2 tiles compute the same chain per element).
#include "kernels/ref_common.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TANDEM_REF_AVX2 1
#endif

namespace tandem::kernels::ref {

float load_f32(const Tensor& t, int64_t i) {
  return with_weight_type(t, [&](const auto* p) { return to_f32(p[i]); });
}

namespace {

// The specification: rows [m0, m1) x columns [j0, j1) of C, one FMA chain per element.
void rank_update_scalar(float* c, int64_t ldc, const float* a, int64_t a_m, int64_t a_p,
                        const float* b, int64_t ldb, int64_t m0, int64_t m1, int64_t P, int64_t j0,
                        int64_t j1) {
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t p = 0; p < P; ++p) {
      const float am = a[m * a_m + p * a_p];
      for (int64_t j = j0; j < j1; ++j)
        c[m * ldc + j] = std::fma(am, b[p * ldb + j], c[m * ldc + j]);
    }
}

#ifdef TANDEM_REF_AVX2
// R rows x 8V columns of C at (m, j) held in R * V accumulators across the whole chain over p.
// Accumulator I is row I / V, columns 8 (I % V) ..; the pack expansions spell the R * V FMAs out
// (GCC 12 keeps a loop-indexed accumulator array in memory at -O3, storing it every iteration).
template <int R, int V, size_t... I>
void rank_tile_impl(float* c, int64_t ldc, const float* a, int64_t a_m, int64_t a_p, const float* b,
                    int64_t ldb, int64_t P, std::index_sequence<I...>) {
  __m256 acc[R * V] = {_mm256_loadu_ps(c + (I / V) * ldc + 8 * (I % V))...};
  for (int64_t p = 0; p < P; ++p) {
    const float* bp = b + p * ldb;
    const float* ap = a + p * a_p;
    ((acc[I] = _mm256_fmadd_ps(_mm256_broadcast_ss(ap + (I / V) * a_m),
                               _mm256_loadu_ps(bp + 8 * (I % V)), acc[I])),
     ...);
  }
  (_mm256_storeu_ps(c + (I / V) * ldc + 8 * (I % V), acc[I]), ...);
}

template <int R, int V>
void rank_tile(float* c, int64_t ldc, const float* a, int64_t a_m, int64_t a_p, const float* b,
               int64_t ldb, int64_t m, int64_t P, int64_t j) {
  rank_tile_impl<R, V>(c + m * ldc + j, ldc, a + m * a_m, a_m, a_p, b + j, ldb, P,
                       std::make_index_sequence<R * V>());
}

template <int R>
void rank_rows(float* c, int64_t ldc, const float* a, int64_t a_m, int64_t a_p, const float* b,
               int64_t ldb, int64_t m, int64_t P, int64_t N) {
  int64_t j = 0;
  if constexpr (R == 1) {  // a single row needs more columns in flight to cover FMA latency
    for (; j + 64 <= N; j += 64) rank_tile<1, 8>(c, ldc, a, a_m, a_p, b, ldb, m, P, j);
  }
  for (; j + 16 <= N; j += 16) rank_tile<R, 2>(c, ldc, a, a_m, a_p, b, ldb, m, P, j);
  for (; j + 8 <= N; j += 8) rank_tile<R, 1>(c, ldc, a, a_m, a_p, b, ldb, m, P, j);
  rank_update_scalar(c, ldc, a, a_m, a_p, b, ldb, m, m + R, P, j, N);
}
#endif

}  // namespace

ScratchBuffer::~ScratchBuffer() { std::free(p_); }

float* ScratchBuffer::get(int64_t n) {
  if (n > cap_) {
    std::free(p_);
    cap_ = (std::max<int64_t>(n, 2 * cap_) + 15) / 16 * 16;  // whole 64-byte lines
    p_ = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(cap_) * 4));
    TANDEM_CHECK(p_ != nullptr, "reference kernel scratch: out of memory for {} floats", cap_);
  }
  return p_;
}

float dot_f32(const float* x, const float* y, int64_t n) {
#ifdef TANDEM_REF_AVX2
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc);
  float l[8];
  _mm256_storeu_ps(l, acc);
  for (int64_t j = 0; i < n; ++i, ++j) l[j] = std::fma(x[i], y[i], l[j]);  // dot()'s tail
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
#else
  return dot(x, y, n);
#endif
}

void dot8_f32(const float* x, const float* const* y, int64_t n, float* out) {
#ifdef TANDEM_REF_AVX2
  __m256 acc[8];
  for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(y[r] + i), acc[r]);
  }
  for (int r = 0; r < 8; ++r) {
    float l[8];
    _mm256_storeu_ps(l, acc[r]);
    for (int64_t k = i, j = 0; k < n; ++k, ++j) l[j] = std::fma(x[k], y[r][k], l[j]);  // the tail
    out[r] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  }
#else
  for (int r = 0; r < 8; ++r) out[r] = dot(x, y[r], n);
#endif
}

void silu_rows(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#ifdef TANDEM_REF_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = silu(x[i]);
}

void fma_rank_update(float* c, int64_t ldc, const float* a, int64_t a_m, int64_t a_p,
                     const float* b, int64_t ldb, int64_t M, int64_t P, int64_t N) {
#ifdef TANDEM_REF_AVX2
  if (M >= 8 && N >= 16) {
    // Many rows: each 16-column strip of B is copied into contiguous memory first, so that every
    // 4-row tile reads it from L1 (strips of a B whose rows are a power of two apart would fall
    // into a few cache sets). The chains are those of the unpacked tiles.
    thread_local ScratchBuffer strip;
    float* pk = strip.get(P * 16);
    int64_t j = 0;
    for (; j + 16 <= N; j += 16) {
      for (int64_t p = 0; p < P; ++p) std::copy(b + p * ldb + j, b + p * ldb + j + 16, pk + p * 16);
      int64_t m = 0;
      for (; m + 4 <= M; m += 4) rank_tile<4, 2>(c + j, ldc, a, a_m, a_p, pk, 16, m, P, 0);
      for (; m < M; ++m) rank_tile<1, 2>(c + j, ldc, a, a_m, a_p, pk, 16, m, P, 0);
    }
    if (j < N) fma_rank_update(c + j, ldc, a, a_m, a_p, b + j, ldb, M, P, N - j);  // unpacked
    return;
  }
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) rank_rows<4>(c, ldc, a, a_m, a_p, b, ldb, m, P, N);
  for (; m < M; ++m) rank_rows<1>(c, ldc, a, a_m, a_p, b, ldb, m, P, N);
#else
  rank_update_scalar(c, ldc, a, a_m, a_p, b, ldb, 0, M, P, 0, N);
#endif
}

}  // namespace tandem::kernels::ref
