// FP8 prefill rows on the tensor cores (production; linear_fp8_set_prefill_tensor_cores,
// linear_fp8_prefill_cuda.cu):
//  - against a host model of the mode: each token's row (normed and rounded to bf16 with
//    input_rms, times 1 + g with the fold) quantised per 128-k block to e4m3 with scale amax / 448,
//    dequantised, times the dequantised weight, in f64; the GPU's fp32 sums and bf16 output stay
//    within 1e-2 relative L2 of it (a scale in the wrong place, a wrong block or layout is O(1));
//  - row invariance: the prefill rows of a 70-row call equal, bit for bit, the same rows in calls
//    of 1..33 rows at other offsets;
//  - the path is taken where it fits (128-row scale blocks, in a multiple of 512) and not
//    elsewhere (8-row scale blocks, SwiGLU pairs, in = 336): those calls keep the dequantised
//    path's bits.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "fp8_linear_test_util.h"

namespace tandem::test {
namespace {

// The host model of the mode (f64 sums of the dequantised values), for a form without SwiGLU.
std::vector<double> tc_model(const Form& f, const Tensor& xh, const Fp8Weight& w, const Tensor& g,
                             const Tensor& res) {
  const int64_t n = xh.dim(0), in = xh.dim(1), out_f = w.codes.dim(0);
  std::vector<double> y(static_cast<size_t>(n * out_f), 0.0);
  std::vector<float> v(static_cast<size_t>(in));
  const auto* codes = static_cast<const f8e4m3*>(w.codes.raw());
  for (int64_t t = 0; t < n; ++t) {
    const float* x = xh.data<const float>() + t * xh.stride(0);
    float inv = 1.f;
    if (f.rms) {
      double ss = 0;
      for (int64_t i = 0; i < in; ++i) ss += static_cast<double>(x[i]) * x[i];
      inv = 1.f / std::sqrt(static_cast<float>(ss / in) + kEps);
    }
    for (int64_t i = 0; i < in; ++i) {
      float e = x[i];
      if (f.rms) e = bf16_to_f32(f32_to_bf16(e * inv));
      if (f.fold) e = e * (1.f + g.data<const float>()[i]);
      v[static_cast<size_t>(i)] = e;
    }
    for (int64_t b = 0; b < in / 128; ++b) {
      float amax = 0.f;
      for (int64_t i = b * 128; i < (b + 1) * 128; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float s = amax > 0.f ? amax / 448.f : 1.f;
      for (int64_t i = b * 128; i < (b + 1) * 128; ++i)
        v[static_cast<size_t>(i)] = f8e4m3_to_f32(f32_to_f8e4m3(v[i] / s)) * s;
    }
    for (int64_t o = 0; o < out_f; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i) {
        const double wv = static_cast<double>(f8e4m3_to_f32(codes[o * in + i])) *
                          w.scale.data<const float>()[(o / w.rows) * w.scale.dim(1) + i / 128];
        acc += wv * v[static_cast<size_t>(i)];
      }
      if (f.epilogue == LinearEpilogue::kAddToOut) acc += res.data<const float>()[t * out_f + o];
      y[static_cast<size_t>(t * out_f + o)] = acc;
    }
  }
  return y;
}

double rel_l2_to(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// (in, out): 128-row scale blocks with in a multiple of 512; a partial last 128-row block.
const Shape3 kTcShapes[] = {{512, 272, 128}, {1024, 384, 128}, {2048, 1040, 128}};

TEST_F(Fp8Linear, TensorCorePrefillFollowsTheDynamicScheme) {
  CudaStream cs;
  Rng rng(43);
  const TensorCores on(true);
  for (const Shape3& sh : kTcShapes) {
    const Fp8Weight w = random_fp8(sh.out, sh.in, sh.rows, rng);
    const Mirror g = random_fold(sh.in, rng);
    constexpr int64_t kN = 37;
    const Mirror xs = random_mirror({kN, sh.in}, rng, DType::kBF16, -2.f, 2.f);
    const Mirror res = random_mirror({kN, sh.out}, rng, DType::kBF16, -4.f, 4.f);
    for (const Form& f :
         {Form{}, Form{.rms = true, .fold = true}, Form{.epilogue = LinearEpilogue::kAddToOut}}) {
      const Tensor out = out_for(f, kN, sh.out, res);
      const int64_t calls = linear_fp8_prefill_tensor_core_calls();
      run(f, xs.dev, w, g.dev, out, 0, cs);
      cs.sync();
      const std::string p = fmt::format("in={},out={},form={}", sh.in, sh.out, f.name());
      EXPECT_EQ(linear_fp8_prefill_tensor_core_calls() - calls, 1) << p;
      const std::vector<double> want = tc_model(f, xs.host, w, g.host, res.host);
      const std::vector<float> got = download(out);
      const double err = rel_l2_to(got, want);
      EXPECT_LT(err, 1e-2) << p;
      fmt::print("linear_fp8.prefill_tc {}: rel L2 {:.3e} against the dynamic-scheme model\n", p,
                 err);
    }
  }
}

TEST_F(Fp8Linear, TensorCorePrefillRowsAreInvariant) {
  CudaStream cs;
  Rng rng(47);
  const TensorCores on(true);
  for (const Shape3& sh : kTcShapes) {
    const Fp8Weight w = random_fp8(sh.out, sh.in, sh.rows, rng);
    const Mirror g = random_fold(sh.in, rng);
    constexpr int64_t kN = 70;
    const Mirror xs = random_mirror({kN, sh.in + 8}, rng, DType::kBF16, -2.f, 2.f);
    const Mirror res = random_mirror({kN, sh.out}, rng, DType::kBF16, -4.f, 4.f);
    const Tensor x = cols(xs.dev, sh.in);
    for (const Form& f :
         {Form{.rms = true, .fold = true}, Form{.epilogue = LinearEpilogue::kAddToOut}}) {
      const Tensor want = out_for(f, kN, sh.out, res);
      const int64_t calls = linear_fp8_prefill_tensor_core_calls();
      run(f, x, w, g.dev, want, 0, cs);
      cs.sync();
      ASSERT_EQ(linear_fp8_prefill_tensor_core_calls() - calls, 1)
          << fmt::format("in={},out={}: the tensor-core path did not take the call", sh.in, sh.out);
      const std::vector<uint16_t> want_bits = download_bits<uint16_t>(want);
      for (const auto& [r, m] : std::vector<std::pair<int64_t, int64_t>>{
               {0, 1}, {3, 5}, {1, 33}, {37, 33}, {5, 4}, {69, 1}}) {
        const Mirror sub{res.host.slice(0, r, r + m), res.dev.slice(0, r, r + m)};
        const Tensor got = out_for(f, m, sh.out, sub);
        run(f, x.slice(0, r, r + m), w, g.dev, got, 0, cs);
        cs.sync();
        const std::vector<uint16_t> bits = download_bits<uint16_t>(got);
        check_bits(
            "linear_fp8.prefill_tc_rows",
            fmt::format("in={},out={},form={},rows [{}, {})", sh.in, sh.out, f.name(), r, r + m),
            std::equal(bits.begin(), bits.end(), want_bits.begin() + r * sh.out));
      }
    }
  }
}

TEST_F(Fp8Linear, TensorCorePrefillLeavesOtherMatricesDequantised) {
  CudaStream cs;
  Rng rng(53);
  // 8-row scale blocks (gate|up), SwiGLU pairs, and in = 336 (not a multiple of 512).
  const std::vector<std::pair<Shape3, Form>> cases = {
      {{1024, 384, 8}, Form{}},
      {{1024, 384, 128}, Form{.epilogue = LinearEpilogue::kSwiGluPairs, .rms = true, .fold = true}},
      {{336, 200, 128}, Form{.rms = true, .fold = true}}};
  for (const auto& [sh, f] : cases) {
    const Fp8Weight w = random_fp8(sh.out, sh.in, sh.rows, rng);
    const Mirror g = random_fold(sh.in, rng);
    constexpr int64_t kN = 20;
    const Mirror xs = random_mirror({kN, sh.in}, rng, DType::kBF16, -2.f, 2.f);
    const Mirror res = random_mirror({kN, sh.out}, rng, DType::kBF16, -4.f, 4.f);
    const Tensor want = out_for(f, kN, sh.out, res), got = out_for(f, kN, sh.out, res);
    {
      const TensorCores off(false);  // the dequantised path
      run(f, xs.dev, w, g.dev, want, 0, cs);
    }
    const int64_t calls = linear_fp8_prefill_tensor_core_calls();
    {
      const TensorCores on(true);
      run(f, xs.dev, w, g.dev, got, 0, cs);
    }
    cs.sync();
    const std::string p =
        fmt::format("in={},out={},rows={},form={}", sh.in, sh.out, sh.rows, f.name());
    EXPECT_EQ(linear_fp8_prefill_tensor_core_calls(), calls) << p;
    check_bits("linear_fp8.prefill_tc_declined", p, bytes_of(want) == bytes_of(got));
  }
}

}  // namespace
}  // namespace tandem::test
