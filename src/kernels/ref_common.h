// Helpers shared by the CPU reference kernels: typed weight access and the fixed-order dot
// product that makes every reference kernel row-invariant. The reference computes activations in
// f32 only; weights may be bf16, f16 or f32.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels::ref {

// Threads for a parallel loop of `work` multiply-adds: small loops stay on one thread, since
// waking a team costs more than they do (the split is across outputs, so results never change).
inline int threads_for(const ExecContext& ctx, int64_t work) {
  return work < (int64_t{1} << 18) ? 1 : ctx.n_threads;
}

inline float silu(float x) { return x / (1.f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

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

// Dot product with 8 independent fp32 partial sums reduced in a fixed order. The order depends
// only on n, never on which row or how many rows are being computed.
template <typename W>
inline float dot(const float* x, const W* w, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * to_f32(w[i + l]);
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += x[i] * to_f32(w[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

inline void expect_f32_act(const Tensor& t, const char* what) {
  TANDEM_CHECK(t.dtype() == DType::kF32 && t.device() == Device::kCpu,
               "reference kernel: {} must be f32 on cpu, got {}", what, t.describe());
  TANDEM_CHECK(t.ndim() == 0 || t.stride(-1) == 1,
               "reference kernel: {} must have a contiguous last dim, got strides {}", what,
               shape_str(t.strides()));
}

}  // namespace tandem::kernels::ref
