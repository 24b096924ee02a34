// Pieces shared by the FP8 linear tests on CUDA (conformance_fp8_test.cpp,
// conformance_fp8_prefill_test.cpp): random FP8 matrices, the forms of a call (epilogue,
// input_rms, folded norm), the fp32 reference of each form, the CUDA call, the test shapes and the
// fixture that reserves the FP8 scratch.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/linear/linear.h"
#include "kernels/swiglu/swiglu.h"

namespace tandem::test {

using namespace tandem::kernels;

inline Tensor cols(const Tensor& t, int64_t w) { return t.slice(-1, 0, w); }

// FP8 prefill rows on the tensor cores (production) or not (the dequantised path) for a scope.
struct TensorCores {
  bool prev;
  explicit TensorCores(bool on) : prev(linear_fp8_set_prefill_tensor_cores(on)) {}
  ~TensorCores() { linear_fp8_set_prefill_tensor_cores(prev); }
  TensorCores(const TensorCores&) = delete;
  TensorCores& operator=(const TensorCores&) = delete;
};

// A random FP8 matrix: codes uniform over the finite e4m3 values (0x7f and 0xff are NaN), and
// block scales in [2^-9, 2^-6).
struct Fp8Weight {
  Tensor codes;  // host f8_e4m3 [out, in]
  Tensor scale;  // host f32 [ceil(out / rows), ceil(in / 128)]
  int64_t rows = 128;
  Tensor codes_dev, scale_dev;
};

inline Fp8Weight random_fp8(int64_t out_f, int64_t in, int64_t block_rows, Rng& rng) {
  Fp8Weight w;
  w.rows = block_rows;
  w.codes = Tensor::zeros({out_f, in}, DType::kF8E4M3);
  auto* c = static_cast<uint8_t*>(w.codes.raw());
  for (int64_t i = 0; i < w.codes.numel(); ++i) {
    uint8_t b = static_cast<uint8_t>(rng.gen()() & 0xff);
    if ((b & 0x7f) == 0x7f) b = static_cast<uint8_t>(b & 0xf0);  // NaN: another code
    c[i] = b;
  }
  w.scale = Tensor::zeros({(out_f + block_rows - 1) / block_rows, (in + 127) / 128}, DType::kF32);
  for (int64_t i = 0; i < w.scale.numel(); ++i) {
    w.scale.data<float>()[i] = std::ldexp(1.f + rng.value(0.f, 1.f), -8 - rng.index(2));
  }
  w.codes_dev = w.codes.to(Device::kCuda);
  w.scale_dev = w.scale.to(Device::kCuda);
  return w;
}

// bf16 [in] zero-centred norm weight g (the kernel applies 1 + g) and its host f32 copy.
inline Mirror random_fold(int64_t in, Rng& rng) {
  return random_mirror({in}, rng, DType::kBF16, 0.f, 0.5f);
}

// x (1 + g) per element as the kernel forms it: rounded once to bf16 (host f32 values).
inline Tensor folded_x(const Tensor& xh, const Tensor& g) {
  Tensor r = Tensor::zeros(xh.shape(), DType::kF32);
  for (int64_t t = 0; t < xh.dim(0); ++t) {
    for (int64_t i = 0; i < xh.dim(1); ++i) {
      const float x = xh.data<const float>()[t * xh.stride(0) + i];
      const float v = std::fmaf(x, g.data<const float>()[i], x);
      r.data<float>()[t * r.stride(0) + i] = bf16_to_f32(f32_to_bf16(v));
    }
  }
  return r;
}

// The reference of every form: y = inv_rms(x) (W x') with x' = folded_x (or x), then the epilogue.
struct Form {
  LinearEpilogue epilogue = LinearEpilogue::kNone;
  bool rms = false, fold = false;
  std::string name() const {
    const char* e = epilogue == LinearEpilogue::kNone       ? "none"
                    : epilogue == LinearEpilogue::kAddToOut ? "add"
                                                            : "swiglu";
    return fmt::format("{}{}{}", e, rms ? "+rms" : "", fold ? "+fold" : "");
  }
};

constexpr float kEps = 1e-6f;

inline Tensor reference(const Form& f, const Tensor& xh, const Fp8Weight& w, const Tensor& g,
                        const Tensor& res) {
  const int64_t n = xh.dim(0), out_f = w.codes.dim(0);
  const Tensor xin = f.fold ? folded_x(xh, g) : xh;
  Tensor y = Tensor::zeros({n, out_f}, DType::kF32);
  linear_ref({.x = xin,
              .weight = w.codes,
              .out = y,
              .weight_scale_inv = w.scale,
              .scale_block_rows = w.rows},
             ref_ctx());
  if (f.rms) {
    for (int64_t t = 0; t < n; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < xh.dim(1); ++i) {
        const double v = xh.data<const float>()[t * xh.stride(0) + i];
        ss += v * v;
      }
      const float inv = 1.f / std::sqrt(static_cast<float>(ss / xh.dim(1)) + kEps);
      for (int64_t o = 0; o < out_f; ++o) y.data<float>()[t * out_f + o] *= inv;
    }
  }
  if (f.epilogue == LinearEpilogue::kSwiGluPairs) {
    Tensor act = Tensor::zeros({n, out_f / 2}, DType::kF32);
    swiglu_ref({.out = act, .gate_up = y}, ref_ctx());
    return act;
  }
  if (f.epilogue == LinearEpilogue::kAddToOut) {
    Tensor sum = res.to(Device::kCpu);
    for (int64_t i = 0; i < sum.numel(); ++i) sum.data<float>()[i] += y.data<float>()[i];
    return sum;
  }
  return y;
}

// The CUDA call of a form over x rows (device bf16, possibly strided); `out` holds res for add.
inline void run(const Form& f, const Tensor& xd, const Fp8Weight& w, const Tensor& g_dev,
                const Tensor& out, int64_t decode_rows, const CudaStream& cs) {
  const int64_t n = xd.dim(0), out_f = w.codes.dim(0);
  linear_cuda({.x = xd,
               .weight = w.codes_dev,
               .out = out,
               .epilogue = f.epilogue,
               .scratch = poisoned({n, out_f}, DType::kBF16),
               .input_rms = f.rms,
               .input_rms_eps = kEps,
               .input_scratch = poisoned({n, xd.dim(1)}, DType::kBF16),
               .decode_rows = decode_rows,
               .weight_scale_inv = w.scale_dev,
               .scale_block_rows = w.rows,
               .weight_fold = f.fold ? g_dev : Tensor()},
              cs.ctx());
}

inline Tensor out_for(const Form& f, int64_t n, int64_t out_f, const Mirror& res) {
  if (f.epilogue == LinearEpilogue::kAddToOut) return res.dev.slice(0, 0, n).to(Device::kCuda);
  return poisoned({n, f.epilogue == LinearEpilogue::kSwiGluPairs ? out_f / 2 : out_f},
                  DType::kBF16);
}

inline std::vector<Form> forms(int64_t out_f) {
  std::vector<Form> r = {{}, {.rms = true, .fold = true}, {.epilogue = LinearEpilogue::kAddToOut}};
  if (out_f % 16 == 0)
    r.push_back({.epilogue = LinearEpilogue::kSwiGluPairs, .rms = true, .fold = true});
  return r;
}

// (in, out, scale block rows): one partial 128-k block (336 = 2 5/8 blocks), a partial 128-row
// block, a k-split of several ranges (4096, 5120), the MLP down shape (17408 -> 320), and scale
// rows of 8 (gate|up groups).
struct Shape3 {
  int64_t in, out, rows;
};
const Shape3 kShapes[] = {{64, 37, 128},   {336, 200, 128},   {4096, 1040, 128},
                          {5120, 2176, 8}, {17408, 320, 128}, {1024, 6144, 128}};

class Fp8Linear : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    linear_reserve_fp8_scratch(int64_t{6144} * 17408, Device::kCuda);
  }
};

}  // namespace tandem::test
