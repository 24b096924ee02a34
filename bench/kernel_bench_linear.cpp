// kernel_bench's linear groups (kernel_bench.cpp runs them): the decode linear at the 27B shapes,
// its bench variants, decode groups of 1..1,024 rows, and the FP8 kernels.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernel_bench_util.h"
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_wgmma_shape.h"

namespace tandem::kernel_bench {

using namespace tandem::kernels;  // NOLINT: the ops under test

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

// Decode-linear variants (linear_skinny_set_variant) over the 27B shapes: TB/s at n = 1 and 4,
// timed back to back (batched_ms).
void bench_linear_variants(cudaStream_t s) {
  const ExecContext ctx{Device::kCuda, 1, s};
  std::vector<std::vector<Tensor>> ws;
  for (const auto& [out_f, in] : kQwen27bShapes) {
    std::vector<Tensor> w;
    for (int i = 0; i < 3; ++i) w.push_back(random_bf16({out_f, in}, 20 + i));
    ws.push_back(w);
  }
  const Tensor x = random_bf16({16, 17408}, 3);
  const Tensor out = Tensor::zeros({16, 34816}, DType::kBF16, Device::kCuda);
  const int n_variants = linear_skinny_set_variant(0);
  // Each variant's [4 x out_f] result, against variant 1's, as max |diff| / max |value|.
  auto result = [&](size_t i) {
    const auto [out_f, in] = kQwen27bShapes[i];
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
  for (size_t i = 0; i < std::size(kQwen27bShapes); ++i) baseline.push_back(result(i));
  for (int v = 0; v < n_variants; ++v) {
    linear_skinny_set_variant(v);
    double err = 0;
    for (size_t i = 0; i < std::size(kQwen27bShapes); ++i) {
      const std::vector<float> r = result(i);
      double dmax = 0, vmax = 0;
      for (size_t e = 0; e < r.size(); ++e) {
        dmax = std::max(dmax, static_cast<double>(std::fabs(r[e] - baseline[i][e])));
        vmax = std::max(vmax, static_cast<double>(std::fabs(baseline[i][e])));
      }
      err = std::max(err, dmax / vmax);
    }
    std::string line = fmt::format("linear variant {} (rel diff {:.1e}):", v, err);
    for (size_t i = 0; i < std::size(kQwen27bShapes); ++i) {
      const auto [out_f, in] = kQwen27bShapes[i];
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

// Milliseconds of a decode call of n rows of x through the weights w (three copies, taken in
// turn so that each call reads its matrix from HBM), back to back.
double decode_rows_ms(cudaStream_t s, const Tensor& x, const std::vector<Tensor>& w,
                      const Tensor& out, int64_t n) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const int64_t out_f = w[0].dim(0), in = w[0].dim(1);
  return batched_ms(s, n > 64 ? 8 : 20, [&](int it) {
    linear_cuda({.x = x.slice(0, 0, n).slice(1, 0, in),
                 .weight = w[it % 3],
                 .out = out.slice(0, 0, n).slice(1, 0, out_f),
                 .decode_rows = n},
                ctx);
  });
}

// Group linear_batch: decode calls of n = 1..1024 rows (LinearArgs::decode_rows = n) on the 27B
// shapes, back to back, as TB/s of weight bytes (what a batch must read, once): production (the
// persistent kernel up to 4 rows, the wgmma kernel above), variants 15 and 16 (the wgmma kernel's
// split rule before; with class groups; 5..256 rows) and 13 (the wgmma kernel
// at every n; variant 12, the persistent kernel's groups of 32: f2accc9's run,
// docs/benchmarks-history.md), and from 64 rows the same rows as prefill rows (cuBLASLt: the vendor
// GEMM, other bits); ratio: time over production's at the same n. TFLOP/s = TB/s x n (2 n flops per
// 2-byte weight).
void bench_linear_batch(cudaStream_t s) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const Tensor x = random_bf16({1024, 17408}, 4);
  const Tensor out = Tensor::zeros({1024, 34816}, DType::kBF16, Device::kCuda);
  const std::pair<int, const char*> variants[] = {{0, "production"},      {15, "split rule before"},
                                                  {16, "class groups"},   {13, "wgmma kernel"},
                                                  {18, "shapes by cost"}, {19, "shapes by rows"}};
  linear_reserve_decode_workspace(Device::kCuda);
  for (const auto& [out_f, in] : kQwen27bShapes) {
    std::vector<Tensor> w;
    for (int i = 0; i < 3; ++i) w.push_back(random_bf16({out_f, in}, 30 + i));
    for (const int64_t n : bench_rows({1, 4, 5, 8, 16, 32, 64, 128, 256, 512, 1024})) {
      double production = 0;
      std::string line = fmt::format("linear decode [{},{}] n={}:", out_f, in, n);
      for (const auto& [v, name] : variants) {
        if ((v >= 15 && v <= 16 && (n < 5 || n > 256)) || (n > 4 && v == 13)) continue;
        if (v >= 18 && n < 48) continue;  // the rows rule's shapes below (linear_wgmma_shape.h)
        linear_skinny_set_variant(v);
        const double ms = decode_rows_ms(s, x, w, out, n);
        if (v == 0) production = ms;
        report(fmt::format("linear decode n={} {} [{},{}] (back to back)", n, name, out_f, in), ms,
               2.0 * out_f * in, production);
        line += fmt::format(" v{} {:.2f}", v, 2.0 * out_f * in / (ms * 1e-3) / 1e12);
      }
      if (n >= 64) {  // the same rows as prefill rows: cuBLASLt, the vendor GEMM's speed
        const double ms = batched_ms(s, 8, [&](int it) {
          linear_cuda({.x = x.slice(0, 0, n).slice(1, 0, in),
                       .weight = w[it % 3],
                       .out = out.slice(0, 0, n).slice(1, 0, out_f),
                       .decode_rows = 0},
                      ctx);
        });
        report(
            fmt::format("linear n={} prefill GEMM (cuBLASLt) [{},{}] (back to back)", n, out_f, in),
            ms, 2.0 * out_f * in, production);
        line += fmt::format(" cublas {:.2f}", 2.0 * out_f * in / (ms * 1e-3) / 1e12);
      }
      fmt::print("{}\n", line);
    }
  }
  linear_skinny_set_variant(0);
}

// Group linear_shapes (named only: KERNEL_BENCH_ONLY=linear_shapes): the bf16 wgmma kernel's
// decode calls in each of its item shapes (linear_set_wgmma_shape) beside production's pick, on
// the 27B shapes at KERNEL_BENCH_ROWS (default 8..256), TFLOP/s: the table a shape rule is fitted
// to (bench/fit_wave_model.py), as linear_fp8_batch's configuration columns were for the FP8
// kernel's (linear_fp8_wgmma_shape.h).
void bench_linear_shapes(cudaStream_t s) {
  const Tensor x = random_bf16({1024, 17408}, 4);
  const Tensor out = Tensor::zeros({1024, 34816}, DType::kBF16, Device::kCuda);
  linear_reserve_decode_workspace(Device::kCuda);
  for (const auto& [out_f, in] : kQwen27bShapes) {
    std::vector<Tensor> w;
    for (int i = 0; i < 3; ++i) w.push_back(random_bf16({out_f, in}, 30 + i));
    for (const int64_t n : bench_rows({8, 16, 32, 48, 64, 96, 128, 192, 256})) {
      if (n < 5 || n > 1024) continue;  // the wgmma kernel's calls; x holds 1,024 rows
      const double flop = 2.0 * out_f * in * n;
      std::string line = fmt::format("linear shapes [{},{}] n={}: TFLOP/s", out_f, in, n);
      double production = 0;
      WgmmaItemShape shapes[std::size(kWgmmaItemShapes) + 1] = {{0, 0}};
      std::copy(std::begin(kWgmmaItemShapes), std::end(kWgmmaItemShapes), shapes + 1);
      for (const WgmmaItemShape& shape : shapes) {
        linear_set_wgmma_shape(shape.tile_m, shape.n);
        const double ms = decode_rows_ms(s, x, w, out, n);
        const std::string name = shape.tile_m == 0
                                     ? std::string("production")
                                     : fmt::format("wgmma {}x{}", shape.tile_m, shape.n);
        if (shape.tile_m == 0) production = ms;
        report(fmt::format("linear decode n={} {} [{},{}] (back to back)", n, name, out_f, in), ms,
               flop, production);
        line += fmt::format(" {} {:.0f}", name, flop / (ms * 1e-3) / 1e12);
      }
      linear_set_wgmma_shape(0, 0);
      fmt::print("{}\n", line);
    }
  }
}

namespace {

// Random FP8 codes [out, in] on the device (random bytes without the two NaN codes) and block
// scales of 2^-8.
Tensor random_fp8_codes(int64_t out_f, int64_t in, uint32_t seed) {
  Tensor h = Tensor::zeros({out_f, in}, DType::kF8E4M3);
  auto* c = static_cast<uint8_t*>(h.raw());
  uint32_t r = seed;
  for (int64_t e = 0; e < h.numel(); ++e) {
    r = r * 1664525u + 1013904223u;
    const auto b = static_cast<uint8_t>(r >> 24);
    c[e] = (b & 0x7f) == 0x7f ? 0x3f : b;
  }
  return h.to(Device::kCuda);
}

Tensor fp8_scales(int64_t out_f, int64_t in) {
  Tensor sc = Tensor::zeros({(out_f + 127) / 128, (in + 127) / 128}, DType::kF32);
  for (int64_t e = 0; e < sc.numel(); ++e) sc.data<float>()[e] = 1.f / 256.f;
  return sc.to(Device::kCuda);
}

// Three copies of one 27B matrix, bf16 and FP8 (calls rotate through them, so that L2 holds none
// from one call to the next), and its calls as the model makes them: with input_rms and the folded
// norm for the projections that read the residual (in = 5120), plain otherwise.
struct MatrixCopies {
  int64_t out_f, in;
  bool reads_residual;
  Tensor fold;
  std::vector<Tensor> bf, codes, scales;
  MatrixCopies(int64_t out_f_, int64_t in_, uint32_t seed, const Tensor& fold_all)
      : out_f(out_f_), in(in_), reads_residual(in_ == 5120), fold(fold_all.slice(0, 0, in_)) {
    for (uint32_t i = 0; i < 3; ++i) {
      bf.push_back(random_bf16({out_f, in}, seed + i));
      codes.push_back(random_fp8_codes(out_f, in, 37u * seed + i));
      scales.push_back(fp8_scales(out_f, in));
    }
  }
  // Copy it % 3 over x's rows into out; decode_rows as LinearArgs::decode_rows.
  void bf16(const ExecContext& ctx, int it, const Tensor& x, const Tensor& out,
            const Tensor& scratch, int64_t decode_rows) const {
    linear_cuda({.x = x,
                 .weight = bf[it % 3],
                 .out = out,
                 .input_rms = reads_residual,
                 .input_scratch = scratch,
                 .decode_rows = decode_rows},
                ctx);
  }
  void fp8(const ExecContext& ctx, int it, const Tensor& x, const Tensor& out,
           const Tensor& scratch, int64_t decode_rows) const {
    linear_cuda({.x = x,
                 .weight = codes[it % 3],
                 .out = out,
                 .input_rms = reads_residual,
                 .input_scratch = scratch,
                 .decode_rows = decode_rows,
                 .weight_scale_inv = scales[it % 3],
                 .weight_fold = reads_residual ? fold : Tensor()},
                ctx);
  }
};

}  // namespace

// Group linear_fp8: the FP8 decode linear (block-scaled e4m3, production: linear_fp8_cuda.cu at
// 1-4 rows, linear_fp8_batch_cuda.cu above) on the 27B
// shapes at n = 1, 2, 4, 8, 16, 32 rows, back to back, as TB/s of the bytes it must read (1 per
// weight plus the f32 block scales); ratio: time over the bf16 production kernel's at the same n.
// The projections that read the residual (gate|up, in_proj, q|k|v) run as the model calls them:
// with input_rms and the folded norm; down and o_proj plain. At 1-4 rows also with the tokens in
// the ring's slots instead of staged (linear_fp8_set_staging); at every n also the other kernel
// (linear_fp8_set_batch): the batched one at 1-4 rows, the FP8 kernel in launches of 8 rows above;
// at 5-8 rows also without production's staged form (linear_fp8_set_staged_rows(false): the
// batched kernel where production stages; else production's kernel again);
// at 1 row also with the plan forced to 1, 2 and 4 ranks per tile (linear_fp8_set_plan_splits:
// is a rank's tile cost or its slots' fill what holds out_f = 5120 back? docs/fp8.md, "Not done").
void bench_linear_fp8(cudaStream_t s) {
  const ExecContext ctx{Device::kCuda, 1, s};
  const Tensor x = random_bf16({32, 17408}, 5);
  const Tensor out = Tensor::zeros({32, 34816}, DType::kBF16, Device::kCuda);
  const Tensor scratch = Tensor::zeros({32, 17408}, DType::kBF16, Device::kCuda);
  const Tensor fold = random_bf16({17408}, 6);
  // As the engine does: without the scratch, calls that production gives the FP8 wgmma kernel
  // (32 rows of gate|up, in_proj, q|k|v) fall back to the batched kernel.
  linear_reserve_decode_workspace(Device::kCuda);
  linear_reserve_fp8_scratch(int64_t{34816} * 5120, Device::kCuda);
  for (const auto& [out_f, in] : kQwen27bShapes) {
    const MatrixCopies mc(out_f, in, 40, fold);
    const bool reads_residual = mc.reads_residual;
    const double bytes = static_cast<double>(out_f * in) + 4.0 * mc.scales[0].numel();
    for (const int64_t n : bench_rows({1, 2, 4, 8, 16, 32})) {
      const Tensor xn = x.slice(0, 0, n).slice(1, 0, in),
                   on = out.slice(0, 0, n).slice(1, 0, out_f);
      const Tensor sn = scratch.slice(0, 0, n).slice(1, 0, in);
      const double bf16_ms = batched_ms(s, 20, [&](int it) { mc.bf16(ctx, it, xn, on, sn, n); });
      const auto fp8_call = [&](int it) { mc.fp8(ctx, it, xn, on, sn, n); };
      const double ms = batched_ms(s, 20, fp8_call);
      report(fmt::format("linear fp8 decode n={} [{},{}]{} (back to back)", n, out_f, in,
                         reads_residual ? " input_rms+fold" : ""),
             ms, bytes, bf16_ms);
      std::string extra;  // the other forms: tokens in the slots (1-4 rows), the other kernel
      // Times the call with a setting on (on() before, off() after), reported beside production
      // and appended to the line.
      const auto variant = [&](const std::string& name, auto&& on, auto&& off) {
        on();
        const double v_ms = batched_ms(s, 20, fp8_call);
        off();
        report(fmt::format("linear fp8 decode n={} {} [{},{}] (back to back)", n, name, out_f, in),
               v_ms, bytes, ms);
        extra += fmt::format(", {} {:.2f} TB/s", name, bytes / (v_ms * 1e-3) / 1e12);
      };
      if (n <= 4) {
        variant(
            "tokens in slots", [] { linear_fp8_set_staging(false); },
            [] { linear_fp8_set_staging(true); });
      }
      if (n == 1) {  // production's deep ring off: 4 slots (linear_fp8_set_deep_ring)
        bool prev = true;
        variant(
            "4-slot ring", [&] { prev = linear_fp8_set_deep_ring(false); },
            [&] { linear_fp8_set_deep_ring(prev); });
      }
      for (const int splits : {1, 2, 4}) {  // the plan's ranks per tile, forced (other bits)
        if (n != 1) break;
        variant(
            fmt::format("plan splits {}", splits), [&] { linear_fp8_set_plan_splits(splits); },
            [] { linear_fp8_set_plan_splits(0); });
      }
      if (n > 4 && n <= 8) {  // production's staged 5-8 rows off: the batched kernel
        bool prev = true;
        variant(
            "not staged", [&] { prev = linear_fp8_set_staged_rows(false); },
            [&] { linear_fp8_set_staged_rows(prev); });
      }
      // The other kernel at the same n: above 4 rows launches of up to 8 rows of the FP8 kernel
      // (what production ran before the batched kernel), at 1-4 the batched kernel.
      const bool batched = n >= 5;  // kFp8BatchMinTokens
      variant(
          batched ? "FP8 kernel, groups of 8" : "batched kernel",
          [&] { linear_fp8_set_batch(batched ? Fp8BatchMode::kOff : Fp8BatchMode::kAll); },
          [] { linear_fp8_set_batch(Fp8BatchMode::kProduction); });
      fmt::print("linear fp8 [{},{}] n={}: {:.3f} ms {:.2f} TB/s{} (bf16 {:.3f} ms {:.2f} TB/s)\n",
                 out_f, in, n, ms, bytes / (ms * 1e-3) / 1e12, extra, bf16_ms,
                 2.0 * out_f * in / (bf16_ms * 1e-3) / 1e12);
    }
  }
}

// Group linear_fp8_batch: FP8 decode calls of 16..2,048 rows on the 27B shapes, back to back:
// production (the batched kernel's groups of 32 up to 32 rows, the FP8 wgmma kernel from 33), the
// groups of 32 at every n (what production ran before the wgmma kernel), the wgmma kernel in each
// of its five configurations (linear_fp8_set_wgmma), the bf16 production kernel and the FP8
// prefill path (dequantise + cuBLASLt) at the same n; TFLOP/s (2 out in n per call), ratio: time
// over FP8 production's. Forms as group linear_fp8.
void bench_linear_fp8_batch(cudaStream_t s) {
  const ExecContext ctx{Device::kCuda, 1, s};
  constexpr int64_t kMaxN = 2048;
  const Tensor x = random_bf16({kMaxN, 17408}, 7);
  const Tensor out = Tensor::zeros({kMaxN, 34816}, DType::kBF16, Device::kCuda);
  const Tensor scratch = Tensor::zeros({kMaxN, 17408}, DType::kBF16, Device::kCuda);
  const Tensor fold = random_bf16({17408}, 8);
  linear_reserve_decode_workspace(Device::kCuda);
  linear_reserve_fp8_scratch(int64_t{34816} * 5120, Device::kCuda);
  // (min rows, config, split, class halves, name): production, groups of 32, production without
  // split mode, configurations 1..5 (3-5: 32-token items in the quad form, 5 with three consumer
  // warpgroups), the opt-in fp8-quad-halves (production's routing with it; configurations 4 and 5
  // with it).
  using H = Fp8Halves;
  const std::tuple<int64_t, int, bool, H, const char*> modes[] = {
      {-1, 0, true, H::kOff, "production"},
      {int64_t{1} << 40, 0, true, H::kOff, "groups of 32"},
      {-1, 0, false, H::kOff, "no split"},
      {1, 1, true, H::kOff, "wgmma 128x64"},
      {1, 2, true, H::kOff, "wgmma 64x64"},
      {1, 3, true, H::kOff, "wgmma 128x32 quads"},
      {1, 4, true, H::kOff, "wgmma 64x32 quads"},
      {1, 5, true, H::kOff, "wgmma 192x32 quads"},
      {-1, 0, true, H::kRemainder, "halves production"},
      {1, 4, true, H::kRemainder, "64x32 quads halves"},
      {1, 5, true, H::kRemainder, "192x32 quads halves"}};
  for (const auto& [out_f, in] : kQwen27bShapes) {
    const MatrixCopies mc(out_f, in, 50, fold);
    for (const int64_t n : bench_rows({16, 32, 64, 128, 256, 512, 2048})) {
      const Tensor xn = x.slice(0, 0, n).slice(1, 0, in),
                   on = out.slice(0, 0, n).slice(1, 0, out_f);
      const Tensor sn = scratch.slice(0, 0, n).slice(1, 0, in);
      const double flop = 2.0 * out_f * in * n;
      const int reps = n > 64 ? 8 : 20;
      std::string line = fmt::format("linear fp8 [{},{}] n={}: TFLOP/s", out_f, in, n);
      double production = 0;
      for (const auto& [min_rows, config, split, halves, name] : modes) {
        linear_fp8_set_wgmma(min_rows, config, split);
        linear_fp8_set_quad_halves(halves);
        const double ms = batched_ms(s, reps, [&](int it) { mc.fp8(ctx, it, xn, on, sn, n); });
        if (min_rows < 0 && split && halves == H::kOff) production = ms;
        report(fmt::format("linear fp8 decode n={} {} [{},{}] (back to back)", n, name, out_f, in),
               ms, flop, production);
        line += fmt::format(" {} {:.0f}", name, flop / (ms * 1e-3) / 1e12);
      }
      linear_fp8_set_wgmma(-1, 0);
      linear_fp8_set_quad_halves(H::kOff);
      const double bf16_ms = batched_ms(s, reps, [&](int it) { mc.bf16(ctx, it, xn, on, sn, n); });
      report(fmt::format("linear decode n={} bf16 production [{},{}] (back to back)", n, out_f, in),
             bf16_ms, flop, production);
      // The same rows as FP8 prefill rows on the dequantised path: the whole matrix dequantised,
      // then cuBLASLt (what a step that carries any prefill chunk pays per FP8 matrix the
      // tensor-core path declines).
      const bool prev_tc = linear_fp8_set_prefill_tensor_cores(false);
      const double prefill_ms =
          batched_ms(s, reps, [&](int it) { mc.fp8(ctx, it, xn, on, sn, 0); });
      report(
          fmt::format("linear fp8 prefill rows n={} dequantise + cuBLASLt [{},{}] (back to back)",
                      n, out_f, in),
          prefill_ms, flop, production);
      // Production: the same prefill rows on the tensor cores (tokens quantised, cuBLASLt's
      // block-scaled FP8 GEMM; 0 where it does not take the matrix).
      linear_fp8_set_prefill_tensor_cores(true);
      const int64_t tc_calls = linear_fp8_prefill_tensor_core_calls();
      double tc_ms = batched_ms(s, reps, [&](int it) { mc.fp8(ctx, it, xn, on, sn, 0); });
      linear_fp8_set_prefill_tensor_cores(prev_tc);
      if (linear_fp8_prefill_tensor_core_calls() == tc_calls) tc_ms = 0;
      if (tc_ms > 0) {
        report(fmt::format("linear fp8 prefill rows n={} tensor cores [{},{}] (back to back)", n,
                           out_f, in),
               tc_ms, flop, production);
      }
      fmt::print("{}, bf16 {:.0f}, fp8 prefill path {:.0f}, fp8 prefill tensor cores {:.0f}\n",
                 line, flop / (bf16_ms * 1e-3) / 1e12, flop / (prefill_ms * 1e-3) / 1e12,
                 tc_ms > 0 ? flop / (tc_ms * 1e-3) / 1e12 : 0.0);
    }
  }
}

}  // namespace tandem::kernel_bench
