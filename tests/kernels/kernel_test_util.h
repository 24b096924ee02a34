// Random tensors and comparisons for the reference-kernel tests.
#pragma once

#include <cmath>
#include <random>

#include "core/tensor.h"

namespace tandem::testing {

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float scale = 1.f) {
  Tensor t = Tensor::zeros(shape, DType::kF32);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

inline Tensor to_bf16(const Tensor& f) {
  Tensor b = Tensor::zeros(f.shape(), DType::kBF16);
  for (int64_t i = 0; i < f.numel(); ++i) b.data<bf16>()[i] = f32_to_bf16(f.data<float>()[i]);
  return b;
}

inline Tensor i32_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

inline double max_abs_diff(const float* a, const double* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, static_cast<double>(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return m;
}

}  // namespace tandem::testing
