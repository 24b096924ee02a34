// The CUDA linear over block-scaled FP8 weights (linear_fp8_cuda.cu, docs/fp8.md):
//  - every e4m3 code (subnormals included) is widened exactly: one-hot tokens read single codes;
//  - decode rows (1..8 per launch, decode groups above) against the fp32 reference, with every
//    epilogue, input_rms and the folded norm, on shapes whose scale blocks straddle the matrix
//    edges, and scale rows of 128 and of 8 (the gate|up interleave);
//  - row invariance: a decode row has the same bits alone, among 1..8 rows and in decode groups;
//    the batched kernel's rows (5..32 per launch) and the wgmma kernel's (33 and more in
//    production, any number in its bench configurations) are the 1..8-row kernel's, bit for bit;
//  - prefill rows: bitwise the bf16 path on the load-time dequantisation
//    bf16(f32(code) scale (1 + g)), which is what the prefill path computes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "fp8_linear_test_util.h"
#include "kernels/linear/linear.h"
#include "kernels/swiglu/swiglu.h"

namespace tandem::test {
namespace {

using namespace tandem::kernels;

TEST_F(Fp8Linear, EveryCodeWidensExactly) {
  CudaStream cs;
  Rng rng(3);
  // Row o, column j holds code (o + j) mod 256 (NaNs as 0); token t is one-hot at column j_t, so
  // out[t, o] = f32(code(o, j_t)) * scale exactly (f32 out, one product, the rest zeros).
  constexpr int64_t kOut = 256, kIn = 256;
  Fp8Weight w;
  w.codes = Tensor::zeros({kOut, kIn}, DType::kF8E4M3);
  auto* c = static_cast<uint8_t*>(w.codes.raw());
  for (int64_t o = 0; o < kOut; ++o) {
    for (int64_t j = 0; j < kIn; ++j) {
      const auto b = static_cast<uint8_t>((o + j) & 0xff);
      c[o * kIn + j] = (b & 0x7f) == 0x7f ? 0 : b;
    }
  }
  w.scale = Tensor::zeros({2, 2}, DType::kF32);
  for (int64_t i = 0; i < 4; ++i)
    w.scale.data<float>()[i] = std::ldexp(1.f, -3 - static_cast<int>(i));
  w.codes_dev = w.codes.to(Device::kCuda);
  w.scale_dev = w.scale.to(Device::kCuda);
  int64_t wrong = 0;
  for (int64_t j0 = 0; j0 < kIn; j0 += 8) {
    Tensor xh = Tensor::zeros({8, kIn}, DType::kF32);
    for (int64_t t = 0; t < 8; ++t) xh.data<float>()[t * kIn + j0 + t] = 1.f;
    const Tensor out = poisoned({8, kOut}, DType::kF32);
    linear_cuda({.x = mirror(xh, DType::kBF16).dev,
                 .weight = w.codes_dev,
                 .out = out,
                 .decode_rows = 8,
                 .weight_scale_inv = w.scale_dev,
                 .scale_block_rows = 128},
                cs.ctx());
    cs.sync();
    const std::vector<float> got = download(out);
    for (int64_t t = 0; t < 8; ++t) {
      for (int64_t o = 0; o < kOut; ++o) {
        const int64_t j = j0 + t;
        const float want = f8e4m3_to_f32(w.codes.data<const f8e4m3>()[o * kIn + j]) *
                           w.scale.data<const float>()[(o / 128) * 2 + j / 128];
        wrong += got[t * kOut + o] != want;
      }
    }
  }
  check_bits("linear_fp8.every_code", "256 codes x 256 columns", wrong == 0);
}

TEST_F(Fp8Linear, DecodeRowsMatchTheReference) {
  CudaStream cs;
  Rng rng(11);
  for (const Shape3& sh : kShapes) {
    const Fp8Weight w = random_fp8(sh.out, sh.in, sh.rows, rng);
    const Mirror g = random_fold(sh.in, rng);
    for (const int64_t n : {1, 2, 3, 5, 8, 19, 40}) {
      Mirror xs = random_mirror({n, sh.in + 16}, rng, DType::kBF16, -2.f, 2.f);  // strided rows
      const Mirror res = random_mirror({n, sh.out}, rng, DType::kBF16, -4.f, 4.f);
      for (const Form& f : forms(sh.out)) {
        const std::string p =
            fmt::format("in={},out={},rows={},n={},form={}", sh.in, sh.out, sh.rows, n, f.name());
        const Tensor ref = reference(f, cols(xs.host, sh.in), w, g.host, res.host);
        const Tensor out = out_for(f, n, sh.out, res);
        run(f, cols(xs.dev, sh.in), w, g.dev, out, n, cs);
        cs.sync();
        check_case("linear_fp8.decode", p, rel_l2(download(out), gather(ref)), DType::kBF16);
      }
    }
  }
}

TEST_F(Fp8Linear, DecodeRowsAreInvariant) {
  CudaStream cs;
  Rng rng(23);
  for (const Shape3& sh : kShapes) {
    const Fp8Weight w = random_fp8(sh.out, sh.in, sh.rows, rng);
    const Mirror g = random_fold(sh.in, rng);
    constexpr int64_t kN = 21;  // one batched launch; alone and in 1..8 rows below
    const Mirror xs = random_mirror({kN, sh.in}, rng, DType::kBF16, -2.f, 2.f);
    const Mirror res = random_mirror({kN, sh.out}, rng, DType::kBF16, -4.f, 4.f);
    for (const Form& f : forms(sh.out)) {
      const Tensor all = out_for(f, kN, sh.out, res);
      run(f, xs.dev, w, g.dev, all, kN, cs);
      cs.sync();
      const std::vector<uint16_t> all_bits = download_bits<uint16_t>(all);
      const int64_t cols_out = all.dim(1);
      // Each row alone, and rows [r, r + m) for m = 2..8 (row r first in a call of m).
      for (int64_t m = 1; m <= 8; ++m) {
        for (int64_t r = 0; r + m <= kN; r += 7) {
          const Mirror sub_res{res.host.slice(0, r, r + m), res.dev.slice(0, r, r + m)};
          const Tensor part = out_for(f, m, sh.out, sub_res);
          run(f, xs.dev.slice(0, r, r + m), w, g.dev, part, m, cs);
          cs.sync();
          const std::vector<uint16_t> bits = download_bits<uint16_t>(part);
          const bool same = std::equal(bits.begin(), bits.end(), all_bits.begin() + r * cols_out);
          check_bits(
              "linear_fp8.decode_invariance",
              fmt::format("in={},out={},form={},rows [{}, {})", sh.in, sh.out, f.name(), r, r + m),
              same);
        }
      }
    }
  }
}

// Every shape and form: n rows computed by launches of up to 8 rows of linear_fp8_cuda.cu
// (Fp8BatchMode::kOff, no wgmma kernel), then, for each of `modes` settings (set_mode(i) applies
// setting i and names it), each row range [r, r + m) in a call of its own, checked bitwise against
// those rows. Production's settings are restored at the end.
void check_against_decode_kernel(const char* what, uint64_t seed, int64_t n,
                                 const std::vector<std::pair<int64_t, int64_t>>& ranges, int modes,
                                 const std::function<std::string(int)>& set_mode) {
  CudaStream cs;
  Rng rng(seed);
  struct Restore {
    bool staged_rows = linear_fp8_set_staged_rows(false);
    ~Restore() {
      linear_fp8_set_batch(Fp8BatchMode::kProduction);
      linear_fp8_set_wgmma(-1, 0);
      linear_fp8_set_staged_rows(staged_rows);
    }
  } restore;
  for (const Shape3& sh : kShapes) {
    const Fp8Weight w = random_fp8(sh.out, sh.in, sh.rows, rng);
    const Mirror g = random_fold(sh.in, rng);
    const Mirror xs = random_mirror({n, sh.in + 8}, rng, DType::kBF16, -2.f, 2.f);
    const Mirror res = random_mirror({n, sh.out}, rng, DType::kBF16, -4.f, 4.f);
    const Tensor x = cols(xs.dev, sh.in);
    for (const Form& f : forms(sh.out)) {
      linear_fp8_set_batch(Fp8BatchMode::kOff);
      const bool staged_rows = linear_fp8_set_staged_rows(false);  // 5-8 rows: tokens in slots
      const Tensor want = out_for(f, n, sh.out, res);
      run(f, x, w, g.dev, want, n, cs);
      cs.sync();
      linear_fp8_set_staged_rows(staged_rows);
      linear_fp8_set_batch(Fp8BatchMode::kProduction);
      const std::vector<uint16_t> want_bits = download_bits<uint16_t>(want);
      const int64_t cols_out = want.dim(1);
      for (int mode = 0; mode < modes; ++mode) {
        const std::string name = set_mode(mode);
        for (const auto& [r, m] : ranges) {
          const Mirror sub_res{res.host.slice(0, r, r + m), res.dev.slice(0, r, r + m)};
          const Tensor got = out_for(f, m, sh.out, sub_res);
          run(f, x.slice(0, r, r + m), w, g.dev, got, m, cs);
          cs.sync();
          const std::vector<uint16_t> bits = download_bits<uint16_t>(got);
          check_bits(what,
                     fmt::format("in={},out={},rows={},form={},{},rows [{}, {})", sh.in, sh.out,
                                 sh.rows, f.name(), name, r, r + m),
                     std::equal(bits.begin(), bits.end(), want_bits.begin() + r * cols_out));
        }
      }
    }
  }
}

// The batched FP8 kernel (linear_fp8_batch_cuda.cu) against launches of up to 8 rows of
// linear_fp8_cuda.cu, bitwise: 45 rows (production: one batched launch of 32 rows and one of 13)
// and calls of 1..45 rows at several offsets, with the batched kernel taking every group (kAll:
// 1-4 rows too) or the groups of 5 or more rows (production); the wgmma kernel off.
TEST_F(Fp8Linear, BatchedKernelRowsAreTheDecodeKernelRows) {
  check_against_decode_kernel(
      "linear_fp8.batched_kernel", 29, 45,
      {{0, 45}, {0, 1}, {3, 5}, {8, 8}, {1, 9}, {17, 13}, {5, 16}, {13, 17}, {2, 32}}, 2,
      [](int mode) {
        linear_fp8_set_wgmma(int64_t{1} << 40, 0);  // groups of 32 at 45 rows, not the wgmma kernel
        linear_fp8_set_batch(mode == 1 ? Fp8BatchMode::kAll : Fp8BatchMode::kProduction);
        return std::string(mode == 1 ? "every group" : "production");
      });
}

// Production's staged 5-8 rows (linear_fp8_set_staged_rows: 5-8 rows in the FP8 kernel with the
// tokens staged, where the plan's range fits 5120 k) against launches of up to 8 rows with the
// tokens in the slots, bitwise: calls of 1..21 rows (5..8-row calls, and decode groups whose
// remainder is 5..8 rows), staged alone (the batched kernel off) and in production's routing.
TEST_F(Fp8Linear, StagedEightRowsAreTheDecodeKernelRows) {
  check_against_decode_kernel(
      "linear_fp8.staged_8", 37, 21, {{0, 5}, {3, 6}, {8, 7}, {13, 8}, {0, 21}, {2, 13}, {1, 8}}, 2,
      [](int mode) {
        linear_fp8_set_staged_rows(true);
        linear_fp8_set_batch(mode == 1 ? Fp8BatchMode::kOff : Fp8BatchMode::kProduction);
        return std::string(mode == 1 ? "staged, no batched kernel" : "staged, production");
      });
}

// Production's deep ring (linear_fp8_set_deep_ring: 5 slots for 1 row where the plan's range fits
// 5,120 k) against launches of up to 8 rows with the tokens in the slots, bitwise: calls of 1 row
// at several offsets (the shapes' ranges below and above 5,120 k), the 2-4-row and 8-row calls and
// the 21-row call taking production's forms beside them.
TEST_F(Fp8Linear, DeepRingRowsAreTheDecodeKernelRows) {
  struct Restore {
    bool was = linear_fp8_set_deep_ring(true);
    ~Restore() { linear_fp8_set_deep_ring(was); }
  } restore;
  check_against_decode_kernel("linear_fp8.deep_ring", 41, 21,
                              {{0, 1}, {5, 1}, {20, 1}, {2, 2}, {3, 3}, {9, 4}, {11, 8}, {0, 21}},
                              1, [](int) {
                                linear_fp8_set_deep_ring(true);
                                return std::string("deep ring");
                              });
}

// The FP8 wgmma kernel (linear_fp8_wgmma_cuda.cu) against launches of up to 8 rows of
// linear_fp8_cuda.cu, bitwise: calls of 1..70 rows at several offsets (one and two token tiles,
// partial ones; 17 and 24 rows as production sends them on wide matrices) in each of its five item
// configurations (3-5: 32 tokens in the quad form, four classes a pass; 5: 192-row items, three
// consumer warpgroups) and production's choice (linear_fp8_wgmma_shape.h, from 33 rows; its small
// shapes take 4 or 5), each with split mode allowed (these shapes have few items: most calls split
// by rank where the plan has ranks) and with every item whole.
TEST_F(Fp8Linear, WgmmaKernelRowsAreTheDecodeKernelRows) {
  check_against_decode_kernel(
      "linear_fp8.wgmma_kernel", 31, 70,
      {{0, 70}, {0, 1}, {3, 5}, {4, 24}, {9, 17}, {1, 33}, {5, 64}, {2, 65}, {37, 33}, {7, 32}}, 12,
      [](int mode) {  // configurations 0..5, with and without split mode
        const int config = mode % 6;
        const bool split = mode < 6;
        linear_fp8_set_wgmma(config == 0 ? -1 : 1, config, split);
        return fmt::format("config {}{}", config, split ? "" : " whole items");
      });
}

// The quad form's class halves (linear_fp8_set_quad_halves; the opt-in fp8-quad-halves) against
// launches of up to 8 rows of linear_fp8_cuda.cu, bitwise: configurations 3, 4 and 5 with every
// item halved (split mode off, so that the shapes with several ranks are halved too: each rank's
// posts) and with the opt-in's rule (the last partial wave's items; split mode allowed, as in
// production), calls of 1..70 rows at several offsets.
TEST_F(Fp8Linear, QuadClassHalvesAreTheDecodeKernelRows) {
  struct Restore {
    Fp8Halves was = linear_fp8_set_quad_halves(Fp8Halves::kOff);
    ~Restore() { linear_fp8_set_quad_halves(was); }
  } restore;
  check_against_decode_kernel(
      "linear_fp8.quad_halves", 43, 70, {{0, 70}, {0, 1}, {3, 5}, {9, 17}, {1, 33}, {7, 32}}, 6,
      [](int mode) {
        const int config = 3 + mode % 3;
        const bool all = mode < 3;
        linear_fp8_set_wgmma(1, config, /*split=*/!all);
        linear_fp8_set_quad_halves(all ? Fp8Halves::kAll : Fp8Halves::kRemainder);
        return fmt::format("config {} {}", config, all ? "every item halved" : "remainder halved");
      });
}

TEST_F(Fp8Linear, PrefillRowsAreTheBf16PathOnTheLoadTimeDequantization) {
  const TensorCores off(false);  // production takes some of these shapes on the tensor cores
  CudaStream cs;
  Rng rng(31);
  for (const Shape3& sh : kShapes) {
    const Fp8Weight w = random_fp8(sh.out, sh.in, sh.rows, rng);
    const Mirror g = random_fold(sh.in, rng);
    // bf16(f32(code) scale (1 + g)), the loader's formula for a folded bf16 matrix.
    for (const bool fold : {false, true}) {
      Tensor deq = Tensor::zeros({sh.out, sh.in}, DType::kBF16);
      for (int64_t o = 0; o < sh.out; ++o) {
        for (int64_t i = 0; i < sh.in; ++i) {
          float v = f8e4m3_to_f32(w.codes.data<const f8e4m3>()[o * sh.in + i]) *
                    w.scale.data<const float>()[(o / sh.rows) * w.scale.dim(1) + i / 128];
          if (fold) v *= 1.f + g.host.data<const float>()[i];
          deq.data<bf16>()[o * sh.in + i] = f32_to_bf16(v);
        }
      }
      const Tensor deq_dev = deq.to(Device::kCuda);
      constexpr int64_t kN = 40;
      const Mirror xs = random_mirror({kN, sh.in}, rng, DType::kBF16, -2.f, 2.f);
      const Form f{.rms = fold, .fold = fold};
      const Tensor out = poisoned({kN, sh.out}, DType::kBF16);
      run(f, xs.dev, w, g.dev, out, 3, cs);  // 3 decode rows, 37 prefill rows
      const Tensor want = poisoned({kN, sh.out}, DType::kBF16);
      linear_cuda({.x = xs.dev.slice(0, 3, kN),
                   .weight = deq_dev,
                   .out = want.slice(0, 3, kN),
                   .input_rms = fold,
                   .input_rms_eps = kEps,
                   .input_scratch = poisoned({kN - 3, sh.in}, DType::kBF16),
                   .decode_rows = 0},
                  cs.ctx());
      cs.sync();
      const std::vector<uint16_t> a = download_bits<uint16_t>(out.slice(0, 3, kN).to(Device::kCpu));
      const std::vector<uint16_t> b =
          download_bits<uint16_t>(want.slice(0, 3, kN).to(Device::kCpu));
      check_bits("linear_fp8.prefill_dequantized",
                 fmt::format("in={},out={},rows={},fold={}", sh.in, sh.out, sh.rows, fold), a == b);
    }
  }
}

// With linear_fp8_set_prefill_decode_order the prefill rows of a call are the decode order's rows,
// bitwise: a call of 3 decode and 67 prefill rows against the same 70 rows as decode rows.
TEST_F(Fp8Linear, PrefillRowsInTheDecodeOrderWhenAsked) {
  CudaStream cs;
  Rng rng(37);
  struct Restore {
    ~Restore() { linear_fp8_set_prefill_decode_order(false); }
  } restore;
  for (const Shape3& sh : kShapes) {
    const Fp8Weight w = random_fp8(sh.out, sh.in, sh.rows, rng);
    const Mirror g = random_fold(sh.in, rng);
    constexpr int64_t kN = 70;
    const Mirror xs = random_mirror({kN, sh.in}, rng, DType::kBF16, -2.f, 2.f);
    const Mirror res = random_mirror({kN, sh.out}, rng, DType::kBF16, -4.f, 4.f);
    for (const Form& f : forms(sh.out)) {
      const Tensor want = out_for(f, kN, sh.out, res);
      run(f, xs.dev, w, g.dev, want, kN, cs);
      linear_fp8_set_prefill_decode_order(true);
      const Tensor got = out_for(f, kN, sh.out, res);
      run(f, xs.dev, w, g.dev, got, 3, cs);
      linear_fp8_set_prefill_decode_order(false);
      cs.sync();
      check_bits("linear_fp8.prefill_decode_order",
                 fmt::format("in={},out={},rows={},form={}", sh.in, sh.out, sh.rows, f.name()),
                 download_bits<uint16_t>(got) == download_bits<uint16_t>(want));
    }
  }
}

TEST_F(Fp8Linear, RefusesWhatItCannotRun) {
  CudaStream cs;
  Rng rng(5);
  const Fp8Weight w = random_fp8(32, 40, 128, rng);  // in = 40: not a multiple of 16
  const Mirror x = random_mirror({1, 40}, rng);
  EXPECT_THROW(linear_cuda({.x = x.dev,
                            .weight = w.codes_dev,
                            .out = poisoned({1, 32}, DType::kBF16),
                            .weight_scale_inv = w.scale_dev},
                           cs.ctx()),
               Error);
  const Fp8Weight v = random_fp8(32, 64, 128, rng);
  const Mirror y = random_mirror({1, 64}, rng);
  EXPECT_THROW(
      linear_cuda({.x = y.dev, .weight = v.codes_dev, .out = poisoned({1, 32}, DType::kBF16)},
                  cs.ctx()),
      Error);  // no scales
}

}  // namespace
}  // namespace tandem::test
