// Micro-benchmarks of the decode/verify CUDA kernels on Qwen3.5-27B shapes, reported against the
// memory bound (DESIGN.md section 6): achieved TB/s = bytes that must move / median time, its
// fraction of 4.3 TB/s, and verify(n)/decode(1) time ratios. Timing: CUDA events around each
// launch, warm-up first, median of many repetitions, inputs rotated so L2 does not hold them.
// Usage: [COMMIT=sha] [KERNEL_BENCH_ONLY=groups] kernel_bench OUT.json: the JSON holds the machine,
// commit and command with the rows. Not a model benchmark: `tandem bench` is the end-to-end one.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_graph.h"
#include "core/tensor.h"
#include "kernels/attention/attention.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/linear/linear.h"

namespace {

using namespace tandem;
using namespace tandem::kernels;

constexpr double kBoundTbs = 4.3;

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

struct Row {
  std::string what;
  double ms, bytes, tbs, frac, ratio;
};
std::vector<Row> rows;

void report(const std::string& what, double ms, double bytes, double base_ms) {
  const double tbs = bytes / (ms * 1e-3) / 1e12;
  rows.push_back({what, ms, bytes, tbs, tbs / kBoundTbs, base_ms > 0 ? ms / base_ms : 1.0});
  fmt::print("{:<44} {:>9.4f} ms {:>8.1f} MB {:>6.2f} TB/s {:>5.1f}% ratio {:.3f}\n", what, ms,
             bytes / 1e6, tbs, 100 * tbs / kBoundTbs, base_ms > 0 ? ms / base_ms : 1.0);
  std::fflush(stdout);
}

void bench_copy(cudaStream_t s) {
  const size_t bytes = size_t{2} << 30;
  void *a, *b;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMemset(a, 1, bytes), "cudaMemset");
  const double ms = median_ms(s, 20, [&](int) {
    check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s), "copy");
  });
  report("copy d2d 2 GiB (read+write)", ms, 2.0 * bytes, 0);
  cudaFree(a);
  cudaFree(b);
}

void bench_linear(cudaStream_t s, int64_t out_f, int64_t in) {
  const ExecContext ctx{Device::kCuda, 1, s};
  std::vector<Tensor> w;
  for (int i = 0; i < 3; ++i) w.push_back(random_bf16({out_f, in}, 10 + i));
  const Tensor x = random_bf16({8192, in}, 3);
  const Tensor out = Tensor::zeros({8192, out_f}, DType::kBF16, Device::kCuda);
  double base = 0;
  for (int64_t n : {1, 2, 3, 4, 8, 16}) {
    const double ms = median_ms(s, 50, [&](int i) {
      linear_cuda({x.slice(0, 0, n), w[i % 3], out.slice(0, 0, n)}, ctx);
    });
    if (n == 1) base = ms;
    report(fmt::format("linear skinny [{}x{}] x [{},{}]^T", n, in, out_f, in), ms,
           2.0 * (out_f * in + n * in + n * out_f), base);
  }
  // The folded-norm forms (LinearArgs::input_rms, LinearEpilogue::kAddToOut), ratio to the plain
  // linear of the same n measured next to them.
  const Tensor scratch = Tensor::zeros({16, out_f}, DType::kBF16, Device::kCuda);
  const Tensor x_scratch = Tensor::zeros({16, in}, DType::kBF16, Device::kCuda);
  for (int64_t n : {1, 4}) {
    const Tensor xn = x.slice(0, 0, n), on = out.slice(0, 0, n);
    const double plain = median_ms(s, 50, [&](int i) { linear_cuda({xn, w[i % 3], on}, ctx); });
    const double rms = median_ms(s, 50, [&](int i) {
      linear_cuda({.x = xn,
                   .weight = w[i % 3],
                   .out = on,
                   .input_rms = true,
                   .input_scratch = x_scratch.slice(0, 0, n)},
                  ctx);
    });
    const double add = median_ms(s, 50, [&](int i) {
      linear_cuda({.x = xn,
                   .weight = w[i % 3],
                   .out = on,
                   .epilogue = LinearEpilogue::kAddToOut,
                   .scratch = scratch.slice(0, 0, n)},
                  ctx);
    });
    const double bytes = 2.0 * (out_f * in + n * in + n * out_f);
    report(fmt::format("linear +input_rms [{}x{}] x [{},{}]^T", n, in, out_f, in), rms, bytes,
           plain);
    report(fmt::format("linear +add_to_out [{}x{}] x [{},{}]^T", n, in, out_f, in), add, bytes,
           plain);
  }
  const int64_t n = 8192;
  const double ms = median_ms(s, 5, [&](int i) { linear_cuda({x, w[i % 3], out}, ctx); });
  fmt::print("{:<44} {:>9.4f} ms {:>8.1f} TFLOP/s ({:.1f}% of 790)\n",
             fmt::format("linear gemm  [{}x{}] x [{},{}]^T", n, in, out_f, in), ms,
             2.0 * n * in * out_f / (ms * 1e-3) / 1e12,
             100 * 2.0 * n * in * out_f / (ms * 1e-3) / 790e12);
}

void bench_attention(cudaStream_t s, int64_t ctx_len) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const int64_t hq = 24, hkv = 4, d = 256, bs = 64;
  const int64_t blocks = (ctx_len + bs - 1) / bs;
  const double cache_bytes = 2.0 * blocks * bs * hkv * d * 2;
  const int copies = static_cast<int>(std::max(1.0, std::ceil(512e6 / cache_bytes)));
  const Tensor kc = random_bf16({copies * blocks, bs, hkv, d}, 5),
               vc = random_bf16({copies * blocks, bs, hkv, d}, 6);
  std::vector<Tensor> tables;
  for (int c = 0; c < copies; ++c) {
    Tensor t = Tensor::zeros({blocks}, DType::kI32);
    for (int64_t b = 0; b < blocks; ++b)
      t.data<int32_t>()[b] = static_cast<int32_t>(c * blocks + b);
    tables.push_back(t.to(Device::kCuda));
  }
  const Tensor q = random_bf16({16, hq, d}, 7), g = random_bf16({16, hq, d}, 8);
  const Tensor out = Tensor::zeros({16, hq, d}, DType::kBF16, Device::kCuda);
  Tensor len = Tensor::zeros({1}, DType::kI32);
  len.data<int32_t>()[0] = static_cast<int32_t>(ctx_len);
  const Tensor kv_len = len.to(Device::kCuda);
  const Tensor ws = Tensor::zeros({attention_workspace_floats(16, hq, d, blocks * bs)}, DType::kF32,
                                  Device::kCuda);
  double base = 0;
  for (int64_t n : {1, 2, 3, 4, 9}) {
    const double ms = median_ms(s, 50, [&](int i) {
      attention_cuda({q.slice(0, 0, n), g.slice(0, 0, n), kc, vc, tables[i % copies], kv_len,
                      out.slice(0, 0, n), 0.f, ws},
                     ctx);
    });
    if (n == 1) base = ms;
    report(fmt::format("attention q_len={} ctx={} (24q/4kv x 256)", n, ctx_len), ms,
           2.0 * ctx_len * hkv * d * 2, base);
  }
}

void bench_gdr(cudaStream_t s) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const int64_t hk = 16, hv = 48, dk = 128, dv = 128, cols = 9;
  const Tensor q = random_bf16({9, hk, dk}, 1), k = random_bf16({9, hk, dk}, 2),
               v = random_bf16({9, hv, dv}, 3);
  const Tensor a = random_bf16({9, hv}, 4), b = random_bf16({9, hv}, 5);
  const Tensor a_log = random_bf16({hv}, 6), dt = random_bf16({hv}, 7);
  std::vector<Tensor> states;
  for (int i = 0; i < 8; ++i)
    states.push_back(Tensor::zeros({cols, hv, dk, dv}, DType::kF32, Device::kCuda));
  Tensor one = Tensor::zeros({1}, DType::kI32);
  one.data<int32_t>()[0] = 1;
  const Tensor n_acc = one.to(Device::kCuda);
  const Tensor out = Tensor::zeros({9, hv, dv}, DType::kBF16, Device::kCuda);
  // With the model's output norm fused in (GdrOutputNorm): z, its weight and the normed rows.
  const Tensor z = random_bf16({9, hv, dv}, 8), norm_w = random_bf16({dv}, 9);
  const Tensor normed = Tensor::zeros({9, hv, dv}, DType::kBF16, Device::kCuda);
  for (const bool fused_norm : {false, true}) {
    double base = 0;
    for (int64_t n : {1, 2, 4, 9}) {
      const GdrOutputNorm norm =
          fused_norm ? GdrOutputNorm{z.slice(0, 0, n), norm_w, normed.slice(0, 0, n), 1e-6f}
                     : GdrOutputNorm{};
      const double ms = median_ms(s, 50, [&](int i) {
        gated_delta_rule_cuda({q.slice(0, 0, n), k.slice(0, 0, n), v.slice(0, 0, n),
                               a.slice(0, 0, n), b.slice(0, 0, n), a_log, dt, states[i % 8], n_acc,
                               out.slice(0, 0, n), GdrMode::kRecurrent, 0, 64, norm},
                              ctx);
      });
      if (n == 1) base = ms;
      report(
          fmt::format("gdr recurrent{} n={} (48 v-heads, 128x128)", fused_norm ? "+norm" : "", n),
          ms, 4.0 * hv * dk * dv * (1 + n), base);
    }
  }
}

// Prefill shapes: one 1024-token chunk of an 8K prompt (the bench's default --max-step-tokens).
void bench_attention_prefill(cudaStream_t s) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const int64_t hq = 24, hkv = 4, d = 256, bs = 64, n = 1024;
  for (int64_t ctx_len : {1024, 8192}) {
    const int64_t blocks = (ctx_len + bs - 1) / bs;
    const Tensor kc = random_bf16({blocks, bs, hkv, d}, 5),
                 vc = random_bf16({blocks, bs, hkv, d}, 6);
    Tensor t = Tensor::zeros({blocks}, DType::kI32);
    for (int64_t b = 0; b < blocks; ++b) t.data<int32_t>()[b] = static_cast<int32_t>(b);
    const Tensor table = t.to(Device::kCuda);
    const Tensor q = random_bf16({n, hq, d}, 7), g = random_bf16({n, hq, d}, 8);
    const Tensor out = Tensor::zeros({n, hq, d}, DType::kBF16, Device::kCuda);
    Tensor len = Tensor::zeros({1}, DType::kI32);
    len.data<int32_t>()[0] = static_cast<int32_t>(ctx_len);
    const Tensor kv_len = len.to(Device::kCuda);
    const Tensor ws = Tensor::zeros({attention_workspace_floats(n, hq, d, blocks * bs)},
                                    DType::kF32, Device::kCuda);
    const double ms = median_ms(s, 5, [&](int) {
      attention_cuda({q, g, kc, vc, table, kv_len, out, 0.f, ws}, ctx);
    });
    // Causal: row i sees ctx_len - n + i + 1 positions; QK^T and PV are 2 flops per MAC each.
    const double macs = static_cast<double>(hq) * d * 2.0 * (n * (ctx_len - n) + n * (n + 1) / 2.0);
    fmt::print("{:<44} {:>9.4f} ms {:>8.1f} TFLOP/s ({:.1f}% of 790)\n",
               fmt::format("attention prefill n={} ctx={}", n, ctx_len), ms,
               2.0 * macs / (ms * 1e-3) / 1e12, 100 * 2.0 * macs / (ms * 1e-3) / 790e12);
  }
}

void bench_gdr_chunked(cudaStream_t s) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const int64_t hk = 16, hv = 48, dk = 128, dv = 128, n = 1024;
  const Tensor q = random_bf16({n, hk, dk}, 1), k = random_bf16({n, hk, dk}, 2),
               v = random_bf16({n, hv, dv}, 3);
  const Tensor a = random_bf16({n, hv}, 4), b = random_bf16({n, hv}, 5);
  const Tensor a_log = random_bf16({hv}, 6), dt = random_bf16({hv}, 7);
  const Tensor state = Tensor::zeros({4, hv, dk, dv}, DType::kF32, Device::kCuda);
  Tensor one = Tensor::zeros({1}, DType::kI32);
  one.data<int32_t>()[0] = 1;
  const Tensor n_acc = one.to(Device::kCuda);
  const Tensor out = Tensor::zeros({n, hv, dv}, DType::kBF16, Device::kCuda);
  const double ms = median_ms(s, 5, [&](int) {
    gated_delta_rule_cuda({q, k, v, a, b, a_log, dt, state, n_acc, out, GdrMode::kChunked, 0, 64},
                          ctx);
  });
  fmt::print("{:<44} {:>9.4f} ms {:>8.0f} tok/s (x48 layers: {:.1f} ms per 8K prompt)\n",
             fmt::format("gdr chunked n={} (48 v-heads, 128x128)", n), ms, n / (ms * 1e-3),
             ms * 48 * 8);
}

// Decode-linear variants (linear_skinny_set_variant) over the 27B shapes: TB/s at n = 1 and 4,
// timed back to back (batched_ms).
void bench_linear_variants(cudaStream_t s) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {34816, 5120}, {16480, 5120}, {14336, 5120}, {5120, 17408}, {5120, 6144}};
  std::vector<std::vector<Tensor>> ws;
  for (const auto& [out_f, in] : shapes) {
    std::vector<Tensor> w;
    for (int i = 0; i < 3; ++i) w.push_back(random_bf16({out_f, in}, 20 + i));
    ws.push_back(w);
  }
  const Tensor x = random_bf16({16, 17408}, 3);
  const Tensor out = Tensor::zeros({16, 34816}, DType::kBF16, Device::kCuda);
  const int n_variants = linear_skinny_set_variant(0);
  // Each variant's [4 x out_f] result, against variant 1's, as max |diff| / max |value|.
  auto result = [&](size_t i) {
    const auto [out_f, in] = shapes[i];
    const Tensor o = Tensor::zeros({4, out_f}, DType::kBF16, Device::kCuda);
    linear_cuda({x.slice(0, 0, 4).slice(1, 0, in), ws[i][0], o}, ctx);
    check(cudaStreamSynchronize(s), "sync");
    std::vector<float> r;
    const Tensor hh = o.to(Device::kCpu);
    for (int64_t e = 0; e < hh.numel(); ++e) r.push_back(bf16_to_f32(hh.data<bf16>()[e]));
    return r;
  };
  std::vector<std::vector<float>> baseline;
  linear_skinny_set_variant(1);
  for (size_t i = 0; i < shapes.size(); ++i) baseline.push_back(result(i));
  for (int v = 0; v < n_variants; ++v) {
    linear_skinny_set_variant(v);
    double err = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::vector<float> r = result(i);
      double dmax = 0, vmax = 0;
      for (size_t e = 0; e < r.size(); ++e) {
        dmax = std::max(dmax, static_cast<double>(std::fabs(r[e] - baseline[i][e])));
        vmax = std::max(vmax, static_cast<double>(std::fabs(baseline[i][e])));
      }
      err = std::max(err, dmax / vmax);
    }
    std::string line = fmt::format("linear variant {} (rel diff {:.1e}):", v, err);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto [out_f, in] = shapes[i];
      for (int64_t n : {1, 4}) {
        const double ms = batched_ms(s, 30, [&](int it) {
          linear_cuda({x.slice(0, 0, n).slice(1, 0, in), ws[i][it % 3],
                       out.slice(0, 0, n).slice(1, 0, out_f)},
                      ctx);
        });
        const double tbs = 2.0 * out_f * in / (ms * 1e-3) / 1e12;
        line += fmt::format(" {}x{} n{} {:.2f}", out_f, in, n, tbs);
        rows.push_back({fmt::format("linear variant {} [{}x{}] x [{},{}]^T (back to back)", v, n,
                                    in, out_f, in),
                        ms, 2.0 * out_f * in, tbs, tbs / kBoundTbs, 1.0});
      }
    }
    fmt::print("{}\n", line);
  }
  linear_skinny_set_variant(0);
}

// KERNEL_BENCH_ONLY=copy,linear,attention,attention_prefill,gdr,gdr_chunked picks groups.
bool wanted(const char* group) {
  const char* only = std::getenv("KERNEL_BENCH_ONLY");
  if (only == nullptr || *only == 0) return true;
  const std::string list = std::string(",") + only + ",";
  return list.find(std::string(",") + group + ",") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cudaStream_t s;
    check(cudaStreamCreate(&s), "cudaStreamCreate");
    if (wanted("copy")) bench_copy(s);
    if (wanted("linear")) {
      // Qwen3.5-27B: gate|up, GDN in_proj (qkv|z|b|a), attention q|k|v, down_proj, out/o_proj.
      for (const auto& [out_f, in] : {std::pair<int64_t, int64_t>{34816, 5120},
                                      {16480, 5120},
                                      {14336, 5120},
                                      {5120, 17408},
                                      {5120, 6144}}) {
        bench_linear(s, out_f, in);
      }
    }
    if (wanted("linear_variants")) bench_linear_variants(s);
    if (wanted("attention")) {
      for (int64_t c : {1024, 8192, 32768}) bench_attention(s, c);
    }
    if (wanted("attention_prefill")) bench_attention_prefill(s);
    if (wanted("gdr")) bench_gdr(s);
    if (wanted("gdr_chunked")) bench_gdr_chunked(s);
    if (argc > 1) {
      nlohmann::json out;
      out["machine"] = device_description(Device::kCuda);
      const char* commit = std::getenv("COMMIT");
      const char* only = std::getenv("KERNEL_BENCH_ONLY");
      out["commit"] = commit != nullptr ? commit : "unknown";
      std::string command = only != nullptr ? fmt::format("KERNEL_BENCH_ONLY={} ", only) : "";
      for (int i = 0; i < argc; ++i) command += fmt::format("{}{}", i ? " " : "", argv[i]);
      out["command"] = command;
      out["bound_tb_per_s"] = kBoundTbs;
      for (const Row& r : rows) {
        out["rows"].push_back({{"what", r.what},
                               {"ms", r.ms},
                               {"bytes", r.bytes},
                               {"tb_per_s", r.tbs},
                               {"fraction_of_bound", r.frac},
                               {"ratio_to_n1", r.ratio}});
      }
      std::ofstream f(argv[1]);
      if (!f) fail("cannot write {}", argv[1]);
      f << out.dump(1) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
