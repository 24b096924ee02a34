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
#include "kernel_bench_util.h"
#include "kernels/attention/attention.h"
#include "kernels/conv1d/conv1d.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"

namespace {

using namespace tandem;
using namespace tandem::kernels;
using namespace tandem::kernel_bench;

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

// A device i32 vector (attention metadata: row_start, kv_len).
Tensor device_i32_vec(const std::vector<int32_t>& v) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t.to(Device::kCuda);
}

void bench_attention(cudaStream_t s, int64_t ctx_len) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const int64_t hq = 24, hkv = 4, d = 256, bs = 64;
  const int64_t blocks = (ctx_len + bs - 1) / bs;
  const double cache_bytes = 2.0 * blocks * bs * hkv * d * 2;
  const int copies = static_cast<int>(std::max(1.0, std::ceil(512e6 / cache_bytes)));
  const Tensor kc = random_bf16({copies * blocks, bs, hkv, d}, 5),
               vc = random_bf16({copies * blocks, bs, hkv, d}, 6);
  std::vector<Tensor> tables;  // [1, blocks] each: one sequence
  for (int c = 0; c < copies; ++c) {
    Tensor t = Tensor::zeros({1, blocks}, DType::kI32);
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
    const Tensor row_start = device_i32_vec({0, static_cast<int32_t>(n)});
    const Tensor q_rows = q.slice(0, 0, n);
    const double ms = median_ms(s, 50, [&](int i) {
      attention_cuda({.q = q_rows,
                      .gate = g.slice(0, 0, n),
                      .k_cache = kc,
                      .v_cache = vc,
                      .block_tables = tables[i % copies],
                      .kv_len = kv_len,
                      .out = out.slice(0, 0, n),
                      .seqs = {1, n, row_start},
                      .workspace = ws},
                     ctx);
    });
    if (n == 1) base = ms;
    report(fmt::format("attention q_len={} ctx={} (24q/4kv x 256)", n, ctx_len), ms,
           2.0 * ctx_len * hkv * d * 2, base);
  }
}

// Batched decode/verify: n_seqs sequences x rows (4: a graph bucket at k = 3; 1: plain decode),
// every one at ctx_len positions, all in one call. The sequences' pages come from a pool of at most
// ~2 GB (far beyond L2) that they share when it would be larger; bytes are the K/V the call must
// read.
void bench_attention_batch(cudaStream_t s, int64_t n_seqs, int64_t ctx_len, int64_t rows = 4) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const int64_t hq = 24, hkv = 4, d = 256, bs = 64;
  const int64_t blocks = (ctx_len + bs - 1) / bs;
  const int64_t pool = std::min(n_seqs * blocks, (int64_t{2} << 30) / (2 * bs * hkv * d * 2));
  const Tensor kc = Tensor::zeros({pool, bs, hkv, d}, DType::kBF16, Device::kCuda),
               vc = Tensor::zeros({pool, bs, hkv, d}, DType::kBF16, Device::kCuda);
  fill_uniform(kc, 5, -1.f, 1.f);
  fill_uniform(vc, 6, -1.f, 1.f);
  Tensor t = Tensor::zeros({n_seqs, blocks}, DType::kI32);
  for (int64_t i = 0; i < n_seqs * blocks; ++i) {
    t.data<int32_t>()[i] = static_cast<int32_t>((i * 7919) % pool);  // scattered pages
  }
  const Tensor tables = t.to(Device::kCuda);
  std::vector<int32_t> rs(1, 0), lens(static_cast<size_t>(n_seqs), static_cast<int32_t>(ctx_len));
  for (int64_t i = 0; i < n_seqs; ++i) rs.push_back(rs.back() + static_cast<int32_t>(rows));
  const Tensor row_start = device_i32_vec(rs), kv_len = device_i32_vec(lens);
  const Tensor q = random_bf16({n_seqs * rows, hq, d}, 7),
               g = random_bf16({n_seqs * rows, hq, d}, 8);
  const Tensor out = Tensor::zeros({n_seqs * rows, hq, d}, DType::kBF16, Device::kCuda);
  const Tensor ws = Tensor::zeros({attention_workspace_floats(n_seqs * rows, hq, d, blocks * bs)},
                                  DType::kF32, Device::kCuda);
  const double ms = median_ms(s, 20, [&](int) {
    attention_cuda({.q = q,
                    .gate = g,
                    .k_cache = kc,
                    .v_cache = vc,
                    .block_tables = tables,
                    .kv_len = kv_len,
                    .out = out,
                    .seqs = {n_seqs, rows, row_start},
                    .workspace = ws},
                   ctx);
  });
  report(fmt::format("attention batch {}x{} rows ctx={} (24q/4kv x 256)", n_seqs, rows, ctx_len),
         ms, 2.0 * n_seqs * ctx_len * hkv * d * 2, 0);
}

// The GDN recurrence (Qwen3.5-27B shape) over n_seqs sequences of `rows` rows each, every one
// first folding `rows` accepted rows of its last step (n_seqs = 1: the decode/verify figures).
// Bytes: per sequence one read and one write of the committed f32 state, the folded replay rows,
// the rows' inputs, outputs (and normed outputs) and their replay copies. The slots rotate over a
// pool of >= 96 states (~290 MB) so that L2 holds none of them.
void bench_gdr_batch(cudaStream_t s, int64_t n_seqs, int64_t rows, bool fused_norm, double base,
                     double* ms_out, const char* label = "") {
  const ExecContext ctx{Device::kCuda, 1, s};
  const int64_t hk = 16, hv = 48, dk = 128, dv = 128, replay_rows = 9;
  const int64_t width = gdr_replay_width(hk, dk, hv, dv), n = n_seqs * rows;
  const int64_t n_slots = std::max<int64_t>(n_seqs, 96), rotations = n_slots / n_seqs;
  const Tensor q = random_bf16({n, hk, dk}, 1), k = random_bf16({n, hk, dk}, 2),
               v = random_bf16({n, hv, dv}, 3), a = random_bf16({n, hv}, 4),
               b = random_bf16({n, hv}, 5), z = random_bf16({n, hv, dv}, 8);
  const Tensor a_log = random_bf16({hv}, 6), dt = random_bf16({hv}, 7),
               norm_w = random_bf16({dv}, 9);
  const Tensor state = Tensor::zeros({n_slots, hv, dk, dv}, DType::kF32, Device::kCuda);
  const Tensor replay =
      Tensor::zeros({n_slots, 2, replay_rows, width}, DType::kBF16, Device::kCuda);
  fill_uniform(state, 10, -0.3f, 0.3f);
  fill_uniform(replay, 11, -1.f, 1.f);
  const Tensor out = Tensor::zeros({n, hv, dv}, DType::kBF16, Device::kCuda);
  const Tensor normed = Tensor::zeros({n, hv, dv}, DType::kBF16, Device::kCuda);
  std::vector<int32_t> rs(1, 0), n_acc(n_seqs, static_cast<int32_t>(rows));
  for (int64_t i = 0; i < n_seqs; ++i) rs.push_back(rs.back() + static_cast<int32_t>(rows));
  const Tensor row_start = device_i32_vec(rs), n_acc_d = device_i32_vec(n_acc);
  std::vector<Tensor> slots, parity;  // per rotation
  for (int64_t r = 0; r < rotations; ++r) {
    std::vector<int32_t> sl, pa;
    for (int64_t i = 0; i < n_seqs; ++i) {
      sl.push_back(static_cast<int32_t>(r * n_seqs + i));
      pa.push_back(static_cast<int32_t>(r % 2));
    }
    slots.push_back(device_i32_vec(sl));
    parity.push_back(device_i32_vec(pa));
  }
  const GdrOutputNorm norm = fused_norm ? GdrOutputNorm{z, norm_w, normed, 1e-6f} : GdrOutputNorm{};
  const double ms = median_ms(s, n_seqs > 32 ? 20 : 50, [&](int i) {
    gated_delta_rule_cuda({.q = q,
                           .k = k,
                           .v = v,
                           .a = a,
                           .b = b,
                           .a_log = a_log,
                           .dt_bias = dt,
                           .state = state,
                           .replay = replay,
                           .out = out,
                           .seqs = {n_seqs, rows, row_start},
                           .slot = slots[i % rotations],
                           .n_acc = n_acc_d,
                           .parity = parity[i % rotations],
                           .start_position = n_acc_d,
                           .mode = GdrMode::kRecurrent,
                           .chunk_size = 64,
                           .norm = norm},
                          ctx);
  });
  const double row_bytes = 2.0 * (2 * hk * dk + hv * dv + 2 * hv + (fused_norm ? hv * dv : 0)) +
                           2.0 * hv * dv * (fused_norm ? 2 : 1) + 2.0 * width;
  const double bytes = n_seqs * (2.0 * 4 * hv * dk * dv + 2.0 * rows * width) + n * row_bytes;
  const std::string what =
      n_seqs == 1 ? fmt::format("gdr recurrent{} n={} (48 v-heads, 128x128)",
                                fused_norm ? "+norm" : "", rows)
                  : fmt::format("gdr recurrent{} batch {}x{} rows (48 v-heads, 128x128){}",
                                fused_norm ? "+norm" : "", n_seqs, rows, label);
  report(what, ms, bytes, base);
  if (ms_out != nullptr) *ms_out = ms;
}

void bench_gdr(cudaStream_t s) {
  for (const bool fused_norm : {false, true}) {
    double base = 0;
    for (int64_t n : {1, 2, 4, 9})
      bench_gdr_batch(s, 1, n, fused_norm, base, n == 1 ? &base : nullptr);
  }
  // Production (the streaming kernel from 8 sequences, row pairs in 3 passes), its four-pass form
  // (pairs off), the per-sequence grid, then the register form (opt-in; it takes calls of 2+ rows
  // a sequence, so its "x 1" row is the four-pass streaming kernel's and the ratio is to that).
  for (const int64_t n_seqs : {8, 32, 256}) {
    for (const int path : {0, 1, 2, 3}) {
      const int64_t prev = gated_delta_rule_set_stream_min_seqs(path != 2 ? 8 : n_seqs + 1);
      const bool prev_pairs = gated_delta_rule_set_stream_pairs(path != 1 && path != 3);
      const bool prev_regs = gated_delta_rule_set_stream_registers(path == 3);
      double base = 0;
      for (const int64_t rows : {1, 2, 4}) {
        if (rows == 2 && (path == 1 || path == 2)) continue;
        bench_gdr_batch(s, n_seqs, rows, true, base, rows == 1 ? &base : nullptr,
                        path == 0   ? " stream"
                        : path == 1 ? " stream four-pass"
                        : path == 2 ? " per-sequence grid"
                                    : " stream registers");
      }
      gated_delta_rule_set_stream_min_seqs(prev);
      gated_delta_rule_set_stream_pairs(prev_pairs);
      gated_delta_rule_set_stream_registers(prev_regs);
    }
  }
}

// conv1d of the 27B's GDN channels (q | k | v, 10,240) over n_seqs sequences of `rows` decode or
// verify rows each, history 7 (k = 3 drafts), the slots rotated over 4 pool sets so that the
// history comes from memory as in a step; the scalar kernel (production), then the vector one
// (opt-in). Bytes: each sequence's history block read and written whole, x and out rows.
void bench_conv(cudaStream_t s) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const int64_t channels = 2 * 16 * 128 + 48 * 128, hist_len = 7, kernel = 4, rotations = 4;
  for (const int64_t n_seqs : {8, 32, 256}) {
    for (const int64_t rows : {1, 4}) {
      const int64_t n = n_seqs * rows, n_slots = n_seqs * rotations;
      const Tensor x = random_bf16({n, channels}, 21), w = random_bf16({channels, 1, kernel}, 22);
      const Tensor hist = random_bf16({n_slots, channels, hist_len}, 23);
      const Tensor out = Tensor::zeros({n, channels}, DType::kBF16, Device::kCuda);
      std::vector<int32_t> rs(1, 0), n_acc(n_seqs, 1);
      for (int64_t i = 0; i < n_seqs; ++i) rs.push_back(rs.back() + static_cast<int32_t>(rows));
      const Tensor row_start = device_i32_vec(rs), n_acc_d = device_i32_vec(n_acc);
      std::vector<Tensor> slots;
      for (int64_t r = 0; r < rotations; ++r) {
        std::vector<int32_t> sl;
        for (int64_t i = 0; i < n_seqs; ++i) sl.push_back(static_cast<int32_t>(r * n_seqs + i));
        slots.push_back(device_i32_vec(sl));
      }
      const double bytes = n_seqs * 2.0 * channels * hist_len * 2 + n * 2.0 * channels * 2;
      double base = 0;
      for (const bool vec : {false, true}) {
        const int64_t prev = conv1d_set_vector_min_seqs(vec ? 1 : kConvVectorNever);
        const double ms = median_ms(s, 50, [&](int i) {
          conv1d_cuda({.x = x,
                       .weight = w,
                       .history = hist,
                       .out = out,
                       .seqs = {n_seqs, rows, row_start},
                       .slot = slots[i % rotations],
                       .n_acc = n_acc_d,
                       .mode = ConvHistoryMode::kSpec},
                      ctx);
        });
        conv1d_set_vector_min_seqs(prev);
        report(fmt::format("conv1d batch {}x{} rows (10240 ch, history 7){}", n_seqs, rows,
                           vec ? " vector" : " scalar"),
               ms, bytes, base);
        if (!vec) base = ms;
      }
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
    Tensor t = Tensor::zeros({1, blocks}, DType::kI32);
    for (int64_t b = 0; b < blocks; ++b) t.data<int32_t>()[b] = static_cast<int32_t>(b);
    const Tensor table = t.to(Device::kCuda);
    const Tensor q = random_bf16({n, hq, d}, 7), g = random_bf16({n, hq, d}, 8);
    const Tensor out = Tensor::zeros({n, hq, d}, DType::kBF16, Device::kCuda);
    const Tensor kv_len = device_i32_vec({static_cast<int32_t>(ctx_len)});
    const Tensor row_start = device_i32_vec({0, static_cast<int32_t>(n)});
    const double ms = median_ms(s, 5, [&](int) {
      attention_cuda({.q = q,
                      .gate = g,
                      .k_cache = kc,
                      .v_cache = vc,
                      .block_tables = table,
                      .kv_len = kv_len,
                      .out = out,
                      .seqs = {1, n, row_start},
                      .prefill = true},
                     ctx);
    });
    // Causal: row i sees ctx_len - n + i + 1 positions; QK^T and PV are 2 flops per MAC each.
    const double macs = static_cast<double>(hq) * d * 2.0 * (n * (ctx_len - n) + n * (n + 1) / 2.0);
    fmt::print("{:<44} {:>9.4f} ms {:>8.1f} TFLOP/s ({:.1f}% of 790)\n",
               fmt::format("attention prefill n={} ctx={}", n, ctx_len), ms,
               2.0 * macs / (ms * 1e-3) / 1e12, 100 * 2.0 * macs / (ms * 1e-3) / 790e12);
  }
}

// Prefill: n_seqs chunks of n / n_seqs rows in one call, at start positions off the 64 grid
// (n_seqs = 1: one 1024-row chunk from position 0).
void bench_gdr_chunked(cudaStream_t s) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const int64_t hk = 16, hv = 48, dk = 128, dv = 128, n = 1024;
  const Tensor q = random_bf16({n, hk, dk}, 1), k = random_bf16({n, hk, dk}, 2),
               v = random_bf16({n, hv, dv}, 3);
  const Tensor a = random_bf16({n, hv}, 4), b = random_bf16({n, hv}, 5);
  const Tensor a_log = random_bf16({hv}, 6), dt = random_bf16({hv}, 7);
  const Tensor out = Tensor::zeros({n, hv, dv}, DType::kBF16, Device::kCuda);
  for (const int64_t n_seqs : {1, 8}) {
    const Tensor state = Tensor::zeros({n_seqs, hv, dk, dv}, DType::kF32, Device::kCuda);
    const Tensor replay = Tensor::zeros({n_seqs, 2, 1, gdr_replay_width(hk, dk, hv, dv)},
                                        DType::kBF16, Device::kCuda);
    std::vector<int32_t> rs(1, 0), slot, zeros(n_seqs, 0), start;
    for (int64_t i = 0; i < n_seqs; ++i) {
      rs.push_back(rs.back() + static_cast<int32_t>(n / n_seqs));
      slot.push_back(static_cast<int32_t>(i));
      start.push_back(n_seqs == 1 ? 0 : static_cast<int32_t>(100 + 37 * i));
    }
    const Tensor row_start = device_i32_vec(rs), slot_d = device_i32_vec(slot),
                 zeros_d = device_i32_vec(zeros), start_d = device_i32_vec(start);
    const double ms = median_ms(s, 5, [&](int) {
      gated_delta_rule_cuda({.q = q,
                             .k = k,
                             .v = v,
                             .a = a,
                             .b = b,
                             .a_log = a_log,
                             .dt_bias = dt,
                             .state = state,
                             .replay = replay,
                             .out = out,
                             .seqs = {n_seqs, n / n_seqs, row_start},
                             .slot = slot_d,
                             .n_acc = zeros_d,
                             .parity = zeros_d,
                             .start_position = start_d,
                             .mode = GdrMode::kChunked,
                             .chunk_size = 64},
                            ctx);
    });
    fmt::print("{:<44} {:>9.4f} ms {:>8.0f} tok/s (x48 layers: {:.1f} ms per 8K prompt)\n",
               fmt::format("gdr chunked {}x{} (48 v-heads, 128x128)", n_seqs, n / n_seqs), ms,
               n / (ms * 1e-3), ms * 48 * 8);
  }
}

// KERNEL_BENCH_ONLY=copy,linear,linear_variants,linear_batch,linear_fp8,linear_fp8_batch,attention,
// attention_prefill,gdr,gdr_chunked,conv picks groups (unset: all of them); linear_shapes runs
// only when named.
bool wanted(const char* group, bool by_default = true) {
  const char* only = std::getenv("KERNEL_BENCH_ONLY");
  if (only == nullptr || *only == 0) return by_default;
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
      for (const auto& [out_f, in] : kQwen27bShapes) bench_linear(s, out_f, in);
    }
    if (wanted("linear_variants")) bench_linear_variants(s);
    if (wanted("linear_batch")) bench_linear_batch(s);
    if (wanted("linear_shapes", false)) bench_linear_shapes(s);
    if (wanted("linear_fp8")) bench_linear_fp8(s);
    if (wanted("linear_fp8_batch")) bench_linear_fp8_batch(s);
    if (wanted("attention")) {
      for (int64_t c : {1024, 8192, 32768}) bench_attention(s, c);
      for (int64_t c : {1024, 32768}) {
        for (int64_t b : {8, 32, 256}) bench_attention_batch(s, b, c);
        for (int64_t b : {8, 32, 64}) bench_attention_batch(s, b, c, 1);  // plain decode
      }
    }
    if (wanted("attention_prefill")) bench_attention_prefill(s);
    if (wanted("gdr")) bench_gdr(s);
    if (wanted("gdr_chunked")) bench_gdr_chunked(s);
    if (wanted("conv")) bench_conv(s);
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
