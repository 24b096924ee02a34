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

// ---- batched calls (ops over a SeqLayout): rows of many sequences in one launch ----

// row_start of sequences with rows[s] rows each, the first one starting at row `first`.
inline std::vector<int32_t> row_starts(const std::vector<int64_t>& rows, int64_t first = 0) {
  std::vector<int32_t> rs(1, static_cast<int32_t>(first));
  for (const int64_t n : rows) rs.push_back(rs.back() + static_cast<int32_t>(n));
  return rs;
}

// i32 [rows, cols] from row-major values.
inline Tensor host_i32_2d(const std::vector<int32_t>& v, int64_t rows, int64_t cols) {
  if (static_cast<int64_t>(v.size()) != rows * cols) throw Error("host_i32_2d: size mismatch");
  return host_i32(v).reshape({rows, cols});
}

// Block tables [n_seqs, width] (row-major) over a pool of n_blocks blocks of block_size
// positions: sequence s gets ceil(kv_len[s] / block_size) distinct blocks in random order
// (different sequences may share blocks, as read-only prefixes would), entries past them are -1
// so that a kernel reading beyond kv_len shows under compute-sanitizer.
inline std::vector<int32_t> random_block_tables(const std::vector<int64_t>& kv_len, int64_t width,
                                                int64_t n_blocks, int64_t block_size, Rng& rng) {
  std::vector<int32_t> tables(kv_len.size() * static_cast<size_t>(width), -1);
  std::vector<int32_t> pool = shuffled_block_table(n_blocks, rng);
  for (size_t s = 0; s < kv_len.size(); ++s) {
    const int64_t need = (kv_len[s] + block_size - 1) / block_size;
    if (need > width || need > n_blocks)
      throw Error("random_block_tables: pool or width too small");
    for (int64_t b = 0; b < need; ++b) {  // a partial Fisher-Yates draw without replacement
      std::swap(pool[b], pool[b + rng.index(static_cast<int32_t>(n_blocks - b))]);
      tables[s * width + b] = pool[b];
    }
  }
  return tables;
}

// Rows [a0, a0 + n) of `a` equal rows [b0, b0 + n) of `b` bit for bit, rows being row_elems
// elements of the host bit vectors of two contiguous tensors (download_bits).
template <typename Bits>
inline bool rows_equal(const std::vector<Bits>& a, int64_t a0, const std::vector<Bits>& b,
                       int64_t b0, int64_t n, int64_t row_elems) {
  if ((a0 + n) * row_elems > static_cast<int64_t>(a.size()) ||
      (b0 + n) * row_elems > static_cast<int64_t>(b.size()))
    return false;
  return std::equal(a.begin() + a0 * row_elems, a.begin() + (a0 + n) * row_elems,
                    b.begin() + b0 * row_elems);
}

// Every element of rows [r0, r0 + n) still holds the poison pattern (all bits set).
template <typename Bits>
inline bool rows_poisoned(const std::vector<Bits>& a, int64_t r0, int64_t n, int64_t row_elems) {
  return std::all_of(a.begin() + r0 * row_elems, a.begin() + (r0 + n) * row_elems,
                     [](Bits v) { return v == static_cast<Bits>(~Bits{0}); });
}

// ---- pools of per-slot state (conv history, GDN state and replay) ----

// n distinct slots out of [0, n_slots) in random order, so that no kernel can rely on sequence s
// owning slot s.
inline std::vector<int32_t> distinct_slots(int64_t n, int64_t n_slots, Rng& rng) {
  std::vector<int32_t> all(static_cast<size_t>(n_slots));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng.gen());
  all.resize(static_cast<size_t>(n));
  return all;
}

// The bytes of a contiguous tensor (either device), for bitwise comparisons.
inline std::vector<uint8_t> bytes_of(const Tensor& t) { return download_bits<uint8_t>(t); }

// A contiguous copy (same device) of index i along dim 0 of a contiguous tensor, keeping dim 0
// (a pool slot, a row): [1, ...].
inline Tensor dim0_copy(const Tensor& t, int64_t i) {
  Shape s = t.shape();
  s[0] = 1;
  Tensor r = Tensor::zeros(s, t.dtype(), t.device());
  device_copy(r.raw(), t.device(),
              static_cast<const char*>(t.raw()) + i * t.stride(0) * dtype_size(t.dtype()),
              t.device(), static_cast<size_t>(r.nbytes()));
  return r;
}

// Copies indices [from, from + count) along dim 0 of a contiguous tensor to [to, to + count) of
// another (or the same, not overlapping) with the same size of dim-0 entries: one pool slot into
// another, rows of one call into another's.
inline void copy_dim0(const Tensor& dst, int64_t to, const Tensor& src, int64_t from,
                      int64_t count = 1) {
  const size_t bytes = static_cast<size_t>(src.stride(0) * dtype_size(src.dtype()));
  device_copy(static_cast<char*>(dst.raw()) + to * bytes, dst.device(),
              static_cast<const char*>(src.raw()) + from * bytes, src.device(),
              bytes * static_cast<size_t>(count));
}

// The per-sequence i32 arrays of a batched call (SeqLayout.row_start and the op's own arrays),
// on the host (for the reference) or the device. Arrays an op does not read may be all zeros.
struct SeqArrays {
  Tensor row_start, slot, n_acc, parity, start;
};
inline SeqArrays seq_arrays(const std::vector<int32_t>& row_start, const std::vector<int32_t>& slot,
                            const std::vector<int32_t>& n_acc, const std::vector<int32_t>& parity,
                            const std::vector<int32_t>& start, Device device) {
  const auto put = [&](const std::vector<int32_t>& v) {
    return device == Device::kCpu ? host_i32(v) : device_i32(v);
  };
  return {put(row_start), put(slot), put(n_acc), put(parity), put(start)};
}

// The largest relative L2 error over element ranges [begin, end) of two equally laid out vectors
// (a sequence's rows, a slot of a pool): one bad sequence of 256 is not averaged away. NaN if any
// range has a NaN; 0 for no (or only empty) ranges.
inline double max_rel_l2(const std::vector<float>& out, const std::vector<float>& ref,
                         const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  if (out.size() != ref.size()) return INFINITY;
  double worst = 0.0;
  for (const auto& [b, e] : ranges) {
    if (b >= e) continue;
    const double err =
        rel_l2({out.begin() + b, out.begin() + e}, {ref.begin() + b, ref.begin() + e});
    if (std::isnan(err)) return NAN;
    worst = std::max(worst, err);
  }
  return worst;
}

// The element ranges of each sequence's rows ([row_start[s], row_start[s + 1]) times row_elems).
inline std::vector<std::pair<int64_t, int64_t>> seq_ranges(const std::vector<int32_t>& row_start,
                                                           int64_t row_elems) {
  std::vector<std::pair<int64_t, int64_t>> r;
  for (size_t s = 0; s + 1 < row_start.size(); ++s)
    r.emplace_back(row_start[s] * row_elems, row_start[s + 1] * row_elems);
  return r;
}

// The element ranges of the given slots of a pool whose slots hold slot_elems elements each.
inline std::vector<std::pair<int64_t, int64_t>> slot_ranges(const std::vector<int32_t>& slots,
                                                            int64_t slot_elems) {
  std::vector<std::pair<int64_t, int64_t>> r;
  for (const int32_t s : slots) r.emplace_back(s * slot_elems, (s + 1) * slot_elems);
  return r;
}

// Whether the slots of a pool other than `touched` hold the same values in a and b (elements of
// slot_elems per slot), i.e. an op left every other slot alone.
inline bool other_slots_equal(const std::vector<float>& a, const std::vector<float>& b,
                              const std::vector<int32_t>& touched, int64_t slot_elems) {
  if (a.size() != b.size()) return false;
  const int64_t n_slots = static_cast<int64_t>(a.size()) / slot_elems;
  for (int64_t s = 0; s < n_slots; ++s) {
    if (std::find(touched.begin(), touched.end(), s) != touched.end()) continue;
    if (!std::equal(a.begin() + s * slot_elems, a.begin() + (s + 1) * slot_elems,
                    b.begin() + s * slot_elems))
      return false;
  }
  return true;
}

// A cuda bf16 tensor of random values (magnitude in [lo, hi), random sign, never zero) from a fast
// generator (xorshift64): weights of the Qwen3.5-27B shapes, too large for Rng, in tests that only
// compare GPU results with each other.
inline Tensor random_bf16_device(const Shape& shape, uint64_t seed, float lo = 0.01f,
                                 float hi = 0.1f) {
  Tensor h = Tensor::zeros(shape, DType::kBF16);
  bf16* p = h.data<bf16>();
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  for (int64_t i = 0; i < h.numel(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float mag = lo + (hi - lo) * static_cast<float>(s >> 40) * (1.f / 16777216.f);
    p[i] = f32_to_bf16((s >> 20) & 1 ? mag : -mag);
  }
  return h.to(Device::kCuda);
}

}  // namespace tandem::test
