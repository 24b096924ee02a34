// Shared pieces of kernel_bench (kernel_bench.cpp: main and the copy, attention and GDN groups;
// kernel_bench_linear.cpp: the linear groups): timing, inputs, the rows of the report.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tandem::kernel_bench {

constexpr double kBoundTbs = 4.3;  // DESIGN.md section 6: the H200's copy bandwidth

// The Qwen3.5-27B decode matrices [out, in]: gate|up, GDN in_proj (qkv|z|b|a), attention q|k|v,
// down_proj, out/o_proj.
struct MatrixShape {
  int64_t out_f, in;
};
constexpr MatrixShape kQwen27bShapes[] = {
    {34816, 5120}, {16480, 5120}, {14336, 5120}, {5120, 17408}, {5120, 6144}};

void check(cudaError_t e, const char* what);

// Median milliseconds of fn(i) over reps calls (i rotates inputs), after warm-up.
double median_ms(cudaStream_t s, int reps, const std::function<void(int)>& fn);

// Mean of `reps` back-to-back calls between two events: the per-call cost inside a step, where
// launches queue ahead (median_ms instead pays each call's launch latency on an idle GPU).
double batched_ms(cudaStream_t s, int reps, const std::function<void(int)>& fn);

// The row counts a group runs: `all`, or those of the comma-separated KERNEL_BENCH_ROWS from 1 to
// the largest of `all` (e.g. 48 or 96 between a group's usual counts; for a profile of one call:
// scripts/device/profile_linear.sh, GROUP@ROWS).
std::vector<int64_t> bench_rows(const std::vector<int64_t>& all);

// Random bf16 bits in [-1, 1) (never zero), filled on the host once.
Tensor random_bf16(const Shape& shape, uint32_t seed);

struct Row {
  std::string what;
  double ms, bytes, tbs, frac, ratio;
};
extern std::vector<Row> rows;  // what report() printed, for the JSON

// Prints a row (TB/s of `bytes`, its fraction of kBoundTbs, ms over base_ms) and keeps it.
void report(const std::string& what, double ms, double bytes, double base_ms);

// The linear groups (kernel_bench_linear.cpp).
void bench_linear(cudaStream_t s, int64_t out_f, int64_t in);
void bench_linear_variants(cudaStream_t s);
void bench_linear_batch(cudaStream_t s);
void bench_linear_shapes(cudaStream_t s);  // only when named in KERNEL_BENCH_ONLY
void bench_linear_fp8(cudaStream_t s);
void bench_linear_fp8_batch(cudaStream_t s);

}  // namespace tandem::kernel_bench
