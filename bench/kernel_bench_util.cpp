// Shared pieces of kernel_bench: timing, inputs, the rows of the report (kernel_bench_util.h).
#include "kernel_bench_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace tandem::kernel_bench {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("{}: {}", what, cudaGetErrorString(e));
}

// Median milliseconds of fn(i) over reps calls (i rotates inputs), after warm-up.
double median_ms(cudaStream_t s, int reps, const std::function<void(int)>& fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  for (int i = 0; i < 5; ++i) fn(i);
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(a, s), "cudaEventRecord");
    fn(i);
    check(cudaEventRecord(b, s), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float t = 0.f;
    check(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  check(cudaGetLastError(), "kernel");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::vector<int64_t> bench_rows(const std::vector<int64_t>& all) {
  const char* env = std::getenv("KERNEL_BENCH_ROWS");
  if (env == nullptr || *env == '\0') return all;
  std::vector<int64_t> picked;
  std::string n;
  for (std::istringstream in(env); std::getline(in, n, ',');) {
    char* end = nullptr;
    const int64_t v = std::strtoll(n.c_str(), &end, 10);
    if (n.empty() || *end != '\0') fail("KERNEL_BENCH_ROWS: '{}' is not a row count", n);
    // Any count up to the group's largest (its buffers' size); larger ones are left out, saying so.
    if (v >= 1 && v <= *std::max_element(all.begin(), all.end())) {
      picked.push_back(v);
    } else {
      std::fprintf(stderr, "KERNEL_BENCH_ROWS: %lld rows left out (this group runs 1..%lld)\n",
                   static_cast<long long>(v),
                   static_cast<long long>(*std::max_element(all.begin(), all.end())));
    }
  }
  return picked;
}

// Random bf16 bits in [-1, 1) (never zero), filled on the host once.
Tensor random_bf16(const Shape& shape, uint32_t seed) {
  Tensor h = Tensor::zeros(shape, DType::kBF16);
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < h.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    const float v = (static_cast<float>((x >> 8) & 0xffff) / 65536.f - 0.5f) * 0.2f + 1e-3f;
    h.data<bf16>()[i] = f32_to_bf16(v);
  }
  return h.to(Device::kCuda);
}

// Mean of `reps` back-to-back calls between two events: the per-call cost inside a step, where
// launches queue ahead (median_ms instead pays each call's launch latency on an idle GPU).
double batched_ms(cudaStream_t s, int reps, const std::function<void(int)>& fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  for (int i = 0; i < 5; ++i) fn(i);
  check(cudaEventRecord(a, s), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) fn(i);
  check(cudaEventRecord(b, s), "cudaEventRecord");
  check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float t = 0.f;
  check(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
  check(cudaGetLastError(), "kernel");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t / reps;
}

std::vector<Row> rows;

void report(const std::string& what, double ms, double bytes, double base_ms) {
  const double tbs = bytes / (ms * 1e-3) / 1e12;
  rows.push_back({what, ms, bytes, tbs, tbs / kBoundTbs, base_ms > 0 ? ms / base_ms : 1.0});
  fmt::print("{:<44} {:>9.4f} ms {:>8.1f} MB {:>6.2f} TB/s {:>5.1f}% ratio {:.3f}\n", what, ms,
             bytes / 1e6, tbs, 100 * tbs / kBoundTbs, base_ms > 0 ? ms / base_ms : 1.0);
  std::fflush(stdout);
}

}  // namespace tandem::kernel_bench
