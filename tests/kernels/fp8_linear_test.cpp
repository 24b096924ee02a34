// The CPU reference linear on block-scaled FP8 weights (linear.h) against its specification, bit
// for bit: dequantise each element in fp32 (w * scale of its block, one multiply), then ref::dot.
// Awkward shapes: out and in not multiples of 128 (blocks straddling the right and bottom edges),
// in below 8 and with 8-lane tails, 8-row scale groups (the interleaved gate|up), 1..17 rows and
// two threads, every epilogue and the folded input RMS; and the e4m3 conversions in core/dtype.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/linear/linear.h"
#include "kernels/ref_common.h"

namespace tandem {
namespace {

using namespace testing;
namespace k = kernels;
const ExecContext kOne{.device = Device::kCpu, .n_threads = 1};
const ExecContext kTwo{.device = Device::kCpu, .n_threads = 2};

TEST(E4m3, DecodesEveryCodeAndRoundsToNearestEvenSaturating) {
  for (int c = 0; c < 256; ++c) {
    const float v = f8e4m3_to_f32(f8e4m3{static_cast<uint8_t>(c)});
    const int e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
    EXPECT_EQ(v, (c & 0x80) ? -mag : mag) << c;
    EXPECT_EQ(f32_to_f8e4m3(v).bits, c) << c;  // every finite code round-trips, -0 included
    if ((c & 0x7f) < 0x7e) {  // the midpoint to the next code up goes to the even one
      const float next = f8e4m3_to_f32(f8e4m3{static_cast<uint8_t>(c + 1)});
      const float mid = (v + next) / 2;  // exact
      EXPECT_EQ(f32_to_f8e4m3(mid).bits, (c & 1) ? c + 1 : c) << c;
      EXPECT_EQ(f32_to_f8e4m3(std::nextafter(mid, next)).bits, c + 1) << c;
    }
  }
  EXPECT_EQ(f32_to_f8e4m3(448.f).bits, 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(464.f).bits, 0x7e);  // saturating, never NaN
  EXPECT_EQ(f32_to_f8e4m3(1e30f).bits, 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-INFINITY).bits, 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.f, -11)).bits, 0x00);   // below half the least subnormal
  EXPECT_EQ(f32_to_f8e4m3(-std::ldexp(1.f, -11)).bits, 0x80);  // keeps its sign
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(f32_to_f8e4m3(NAN))));
}

struct Fp8Matrix {
  Tensor w, scale, dequantized;  // f8_e4m3 [out, in], f32 [ceil(out / r), ceil(in / 128)], f32
};

// Random non-NaN codes with random positive block scales; `dequantized` is the scalar statement.
Fp8Matrix random_fp8(int64_t out, int64_t in, int64_t r, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Fp8Matrix m{Tensor::zeros({out, in}, DType::kF8E4M3),
              Tensor::zeros({(out + r - 1) / r, (in + 127) / 128}, DType::kF32),
              Tensor::zeros({out, in}, DType::kF32)};
  for (int64_t i = 0; i < m.scale.numel(); ++i)
    m.scale.data<float>()[i] = std::uniform_real_distribution<float>(1e-4f, 1e-2f)(rng);
  for (int64_t i = 0; i < m.w.numel(); ++i) {
    uint8_t c = static_cast<uint8_t>(rng());
    if ((c & 0x7f) == 0x7f) c ^= 1;  // no NaN
    m.w.data<f8e4m3>()[i].bits = c;
  }
  const int64_t kb = m.scale.dim(1);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      m.dequantized.data<float>()[o * in + i] = f8e4m3_to_f32(m.w.data<f8e4m3>()[o * in + i]) *
                                                m.scale.data<float>()[(o / r) * kb + i / 128];
  return m;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

struct Shape3 {
  int64_t out, in, r;
};

std::string name(const Shape3& s, int64_t n, int threads) {
  return "out=" + std::to_string(s.out) + ",in=" + std::to_string(s.in) +
         ",scale_rows=" + std::to_string(s.r) + ",n_tokens=" + std::to_string(n) +
         ",threads=" + std::to_string(threads);
}

const std::vector<Shape3> kShapes = {{1, 1, 128},     {7, 5, 128},     {3, 129, 128},
                                     {130, 127, 128}, {129, 130, 128}, {256, 384, 128},
                                     {300, 257, 128}, {19, 989, 128},  {64, 320, 8},
                                     {40, 200, 8},    {832, 320, 128}};

TEST(Fp8Linear, EqualsScalarDequantizeThenDot) {
  for (const Shape3& s : kShapes) {
    const Fp8Matrix m = random_fp8(s.out, s.in, s.r, 11 + s.out * 7 + s.in);
    for (int64_t n : {1, 2, 5, 8, 9, 17}) {
      const Tensor x = random_tensor({n, s.in}, 3 + n);
      // The specification, element by element.
      Tensor want = Tensor::zeros({n, s.out}, DType::kF32);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t o = 0; o < s.out; ++o)
          want.data<float>()[t * s.out + o] =
              k::ref::dot(x.data<float>() + t * s.in, m.dequantized.data<float>() + o * s.in, s.in);
      for (int threads : {1, 2}) {
        Tensor got = Tensor::zeros({n, s.out}, DType::kF32);
        k::linear_ref({.x = x,
                       .weight = m.w,
                       .out = got,
                       .weight_scale_inv = m.scale,
                       .scale_block_rows = s.r},
                      threads == 1 ? kOne : kTwo);
        EXPECT_TRUE(same_bits(got, want)) << name(s, n, threads);
      }
      // fp32 accuracy of the product itself, against a double-precision dot of the same values:
      // within n_in * 2^-24 * sum |x w| (the classic summation bound), so the test above compares
      // against a statement that is itself right.
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t o = 0; o < s.out; ++o) {
          double exact = 0, mag = 0;
          for (int64_t i = 0; i < s.in; ++i) {
            const double p = static_cast<double>(x.data<float>()[t * s.in + i]) *
                             m.dequantized.data<float>()[o * s.in + i];
            exact += p;
            mag += std::fabs(p);
          }
          EXPECT_LE(std::fabs(want.data<float>()[t * s.out + o] - exact),
                    static_cast<double>(s.in) * std::ldexp(1.0, -24) * mag + 1e-30)
              << name(s, n, 1) << " t=" << t << " o=" << o;
        }
      }
    }
  }
}

// Epilogues and the folded input RMS: the FP8 call equals the same call on the dequantised f32
// matrix, bit for bit (both are the f32 product, then the same epilogue code).
TEST(Fp8Linear, EpiloguesEqualTheDequantizedF32Linear) {
  for (const Shape3& s : std::vector<Shape3>{{64, 320, 8}, {832, 320, 8}, {48, 130, 128}}) {
    const Fp8Matrix m = random_fp8(s.out, s.in, s.r, 5 + s.out);
    for (int64_t n : {1, 3, 9}) {
      const Tensor x = random_tensor({n, s.in}, 17 + n);
      for (k::LinearEpilogue e : {k::LinearEpilogue::kNone, k::LinearEpilogue::kAddToOut,
                                  k::LinearEpilogue::kSwiGluPairs}) {
        for (bool rms : {false, true}) {
          const int64_t out_cols = e == k::LinearEpilogue::kSwiGluPairs ? s.out / 2 : s.out;
          const Tensor init = random_tensor({n, out_cols}, 23);
          Tensor a = Tensor::zeros({n, out_cols}, DType::kF32),
                 b = Tensor::zeros({n, out_cols}, DType::kF32);
          a.copy_from(init);
          b.copy_from(init);
          const Tensor sa = Tensor::zeros({n, s.out}, DType::kF32),
                       sb = Tensor::zeros({n, s.out}, DType::kF32);
          const bool need_scratch = e != k::LinearEpilogue::kNone;
          k::linear_ref({.x = x,
                         .weight = m.w,
                         .out = a,
                         .epilogue = e,
                         .scratch = need_scratch ? sa : Tensor(),
                         .input_rms = rms,
                         .weight_scale_inv = m.scale,
                         .scale_block_rows = s.r},
                        kTwo);
          k::linear_ref({.x = x,
                         .weight = m.dequantized,
                         .out = b,
                         .epilogue = e,
                         .scratch = need_scratch ? sb : Tensor(),
                         .input_rms = rms},
                        kTwo);
          EXPECT_TRUE(same_bits(a, b))
              << name(s, n, 2) << " epilogue=" << static_cast<int>(e) << " input_rms=" << rms;
        }
      }
    }
  }
}

TEST(Fp8Linear, RefusesMissingOrMisShapedScales) {
  const Fp8Matrix m = random_fp8(130, 200, 128, 1);
  const Tensor x = random_tensor({2, 200}, 2);
  Tensor y = Tensor::zeros({2, 130}, DType::kF32);
  auto message = [&](const Tensor& scale, int64_t r) {
    try {
      k::linear_ref(
          {.x = x, .weight = m.w, .out = y, .weight_scale_inv = scale, .scale_block_rows = r},
          kOne);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(Tensor(), 128)
                .find("needs weight_scale_inv f32 [ceil(out / 128), ceil(in / "
                      "128)] = [2, 2]"),
            std::string::npos);
  EXPECT_NE(message(Tensor::zeros({2, 1}, DType::kF32), 128).find("got f32[2, 1]"),
            std::string::npos);
  EXPECT_NE(message(m.scale, 8).find("= [17, 2]"), std::string::npos);  // rows of 8 need 17
}

}  // namespace
}  // namespace tandem
