// Host-side FP8 helpers for the loader (model/fp8.h).
#include "model/fp8.h"

#include <algorithm>
#include <cmath>

#include "kernels/linear/linear.h"  // fp8_dequantize_rows, kFp8BlockCols

namespace tandem {

Tensor fp8_dequantize(const Tensor& w, const Tensor& scale, int64_t block_rows) {
  TANDEM_CHECK(w.dtype() == DType::kF8E4M3 && w.ndim() == 2 && w.is_contiguous() &&
                   scale.dtype() == DType::kF32 && scale.is_contiguous() &&
                   scale.dim(0) == (w.dim(0) + block_rows - 1) / block_rows &&
                   scale.dim(1) == (w.dim(1) + kernels::kFp8BlockCols - 1) / kernels::kFp8BlockCols,
               "fp8_dequantize: weight {} and scale {} (rows of {}) disagree", w.describe(),
               scale.describe(), block_rows);
  const Tensor hw = w.host(), hs = scale.host();
  const int64_t rows = w.dim(0), cols = w.dim(1);
  Tensor out = Tensor::zeros({rows, cols}, DType::kF32);
  constexpr int64_t kRowsPerTask = 64;
  // The CUDA loader dequantises every matrix (27B: 27 G elements): rows in parallel tasks.
#pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerTask) {
    kernels::fp8_dequantize_rows(hw.data<const f8e4m3>(), hs.data<const float>(), block_rows, cols,
                                 r0, std::min(rows, r0 + kRowsPerTask),
                                 out.data<float>() + r0 * cols);
  }
  return out;
}

Fp8Matrix fp8_quantize(const Tensor& f) {
  TANDEM_CHECK(
      f.dtype() == DType::kF32 && f.ndim() == 2 && f.is_contiguous() && f.device() == Device::kCpu,
      "fp8_quantize: {} must be a host f32 matrix", f.describe());
  constexpr int64_t kR = kFp8BlockRows, kC = kernels::kFp8BlockCols;
  const int64_t rows = f.dim(0), cols = f.dim(1), rb = (rows + kR - 1) / kR,
                cb = (cols + kC - 1) / kC;
  Fp8Matrix q{Tensor::zeros({rows, cols}, DType::kF8E4M3), Tensor::zeros({rb, cb}, DType::kF32)};
  const float* v = f.data<const float>();
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < rb * cb; ++b) {
    const int64_t r0 = b / cb * kR, c0 = b % cb * kC, r1 = std::min(rows, r0 + kR),
                  c1 = std::min(cols, c0 + kC);
    float amax = 0.f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(v[r * cols + c]));
    const float scale = std::max(amax, 1e-12f) / 448.f;
    q.scale.data<float>()[b] = scale;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c)
        q.w.data<f8e4m3>()[r * cols + c] = f32_to_f8e4m3(v[r * cols + c] / scale);
  }
  return q;
}

Tensor fp8_scale_rows(const Tensor& scale, int64_t rows, int64_t block_rows, int64_t r) {
  TANDEM_CHECK(r > 0 && block_rows % r == 0 && scale.dtype() == DType::kF32 &&
                   scale.is_contiguous() && scale.dim(0) == (rows + block_rows - 1) / block_rows,
               "fp8_scale_rows: scale {} of {} rows in blocks of {} cannot be regrouped by {}",
               scale.describe(), rows, block_rows, r);
  const Tensor hs = scale.host();
  const int64_t groups = (rows + r - 1) / r, kb = scale.dim(1);
  Tensor out = Tensor::zeros({groups, kb}, DType::kF32);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < kb; ++j)
      out.data<float>()[g * kb + j] = hs.data<const float>()[(g * r / block_rows) * kb + j];
  return out;
}

}  // namespace tandem
