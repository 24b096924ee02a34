// Helpers for the CUDA tests (header-only: tests/CMakeLists.txt builds *_test.cpp files only):
// random bf16-exact inputs mirrored on cpu (f32, for the reference) and cuda (bf16), poisoned
// outputs, strided gathers, relative L2 error, and the summary table printed after all tests.
#pragma once

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "tolerance.h"

namespace tandem::test {

#define SKIP_WITHOUT_CUDA() \
  if (!::tandem::cuda_available()) GTEST_SKIP() << "no CUDA device"

namespace detail {

struct OpSummary {
  int cases = 0, failed = 0;
  double max_err = 0.0;
  bool bits = false;
};

inline std::map<std::string, OpSummary>& summary() {
  static std::map<std::string, OpSummary> s;
  return s;
}

class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    if (summary().empty()) return;
    fmt::print("\n{:<30} {:>6} {:>12} {:>7}\n", "op", "cases", "max rel err", "result");
    for (const auto& [op, s] : summary()) {
      const std::string err = s.bits ? "bitwise" : fmt::format("{:.3e}", s.max_err);
      fmt::print("{:<30} {:>6} {:>12} {:>7}\n", op, s.cases, err, s.failed ? "FAIL" : "pass");
    }
    std::fflush(stdout);
  }
};

inline ::testing::Environment* const kPrinter =
    ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

}  // namespace detail

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // Never zero: magnitude in [lo, hi), random sign, rounded to bf16.
  float value(float lo = 0.05f, float hi = 1.f) {
    const float mag = std::uniform_real_distribution<float>(lo, hi)(gen_);
    return bf16_to_f32(f32_to_bf16((gen_() & 1) ? mag : -mag));
  }
  int32_t index(int32_t n) { return std::uniform_int_distribution<int32_t>(0, n - 1)(gen_); }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

// A host f32 tensor and its device mirror holding the same values (bf16 or f32 on the device).
struct Mirror {
  Tensor host;  // f32, cpu
  Tensor dev;   // bf16 or f32, cuda
};

inline Tensor host_random(const Shape& shape, Rng& rng, float lo = 0.05f, float hi = 1.f) {
  Tensor t = Tensor::zeros(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.value(lo, hi);
  return t;
}

// host values must be bf16-exact when dev_dtype is bf16 (they are rounded on the host first).
inline Mirror mirror(const Tensor& host_f32, DType dev_dtype) {
  if (dev_dtype == DType::kF32) return Mirror{host_f32, host_f32.to(Device::kCuda)};
  Tensor staged = Tensor::zeros(host_f32.shape(), DType::kBF16);
  for (int64_t i = 0; i < host_f32.numel(); ++i) {
    const float v = host_f32.data<const float>()[i];
    staged.data<bf16>()[i] = f32_to_bf16(v);
    if (bf16_to_f32(staged.data<bf16>()[i]) != v) throw Error("mirror: value is not bf16-exact");
  }
  return Mirror{host_f32, staged.to(Device::kCuda)};
}

inline Mirror random_mirror(const Shape& shape, Rng& rng, DType dev_dtype = DType::kBF16,
                            float lo = 0.05f, float hi = 1.f) {
  return mirror(host_random(shape, rng, lo, hi), dev_dtype);
}

inline Tensor host_i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}
inline Tensor device_i32(const std::vector<int32_t>& v) { return host_i32(v).to(Device::kCuda); }

// A paged cache's block table: blocks 0..n_blocks-1 in random order, so that no kernel can rely on
// consecutive positions sitting in consecutive blocks.
inline std::vector<int32_t> shuffled_block_table(int64_t n_blocks, Rng& rng) {
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng.gen());
  return table;
}

// A cuda tensor whose bytes are all 0xff (NaN for float types), so unwritten outputs show.
inline Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor t = Tensor::zeros(shape, dtype, Device::kCuda);
  detail::cuda_check(cudaMemset(t.raw(), 0xff, static_cast<size_t>(t.nbytes())), "cudaMemset");
  return t;
}

// Elements of a strided f32 host view (rank <= 4) in row-major order of the view.
inline std::vector<float> gather(const Tensor& v) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(v.numel()));
  Shape shape = v.shape(), st = v.strides();
  while (shape.size() < 4) {
    shape.insert(shape.begin(), 1);
    st.insert(st.begin(), 0);
  }
  const float* base = v.data<const float>();
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c)
        for (int64_t d = 0; d < shape[3]; ++d)
          out.push_back(base[a * st[0] + b * st[1] + c * st[2] + d * st[3]]);
  return out;
}

using ViewFn = std::function<Tensor(const Tensor&)>;
inline Tensor identity_view(const Tensor& t) { return t; }

// Host f32 values of the logical view `view(full)` of a contiguous device tensor.
inline std::vector<float> download(const Tensor& dev_full, const ViewFn& view = identity_view) {
  return gather(view(dev_full.to_f32()));
}

template <typename Bits>
inline std::vector<Bits> download_bits(const Tensor& dev_contiguous) {
  const Tensor host = dev_contiguous.to(Device::kCpu);
  std::vector<Bits> bits(static_cast<size_t>(host.nbytes()) / sizeof(Bits));
  std::memcpy(bits.data(), host.raw(), bits.size() * sizeof(Bits));
  return bits;
}

inline double rel_l2(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  if (std::isnan(num)) return NAN;
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Records one case in the summary; fails the test, naming the parameters, if err > tolerance.
inline void check_case(const std::string& op, const std::string& params, double err,
                       DType out_dtype) {
  const double tol = tolerance(out_dtype);
  const bool ok = err <= tol;  // NaN fails
  detail::OpSummary& s = detail::summary()[op];
  ++s.cases;
  s.failed += ok ? 0 : 1;
  s.max_err = std::isnan(err) ? NAN : std::max(s.max_err, err);
  EXPECT_TRUE(ok) << "op=" << op << "," << params << ": rel L2 error " << err << " > " << tol;
}

// Records a bit-exactness check (row invariance, state columns).
inline void check_bits(const std::string& op, const std::string& params, bool equal) {
  detail::OpSummary& s = detail::summary()[op];
  s.bits = true;
  ++s.cases;
  s.failed += equal ? 0 : 1;
  EXPECT_TRUE(equal) << "op=" << op << "," << params << ": results differ bitwise";
}

class CudaStream {
 public:
  CudaStream() { detail::cuda_check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  ~CudaStream() { cudaStreamDestroy(stream_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ExecContext ctx() const { return ExecContext{Device::kCuda, 1, stream_}; }
  void sync() const {
    detail::cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    detail::cuda_check(cudaGetLastError(), "kernel");
  }

 private:
  cudaStream_t stream_ = nullptr;
};

inline ExecContext ref_ctx() {
  return ExecContext{Device::kCpu,
                     static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), nullptr};
}

}  // namespace tandem::test
