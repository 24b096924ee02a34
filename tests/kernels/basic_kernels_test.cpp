// Reference kernels against straightforward double-precision formulas: embedding, RMSNorms,
// linear, RoPE, SwiGLU, argmax; plus row invariance of linear and its SwiGLU epilogue (bitwise).
#include <gtest/gtest.h>

#include <cstring>

#include "kernel_test_util.h"
#include "kernels/argmax/argmax.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "kernels/linear/linear.h"
#include "kernels/ref_common.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"

namespace tandem {
namespace {

using namespace testing;
const ExecContext kCtx{.device = Device::kCpu, .n_threads = 1};

TEST(RefKernels, EmbeddingConvertsRows) {
  const Tensor table = to_bf16(random_tensor({10, 6}, 1));
  const Tensor ids = i32_tensor({3, 0, 9, 3});
  Tensor out = Tensor::zeros({4, 6}, DType::kF32);
  kernels::embedding({.ids = ids, .table = table, .out = out}, kCtx);
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 6; ++i)
      EXPECT_EQ(out.data<float>()[t * 6 + i],
                bf16_to_f32(table.data<bf16>()[ids.data<int32_t>()[t] * 6 + i]));
  Tensor bad = i32_tensor({10});
  EXPECT_THROW(kernels::embedding({.ids = bad, .table = table, .out = out.slice(0, 0, 1)}, kCtx),
               Error);
}

TEST(RefKernels, RmsNormZeroCentredPlainAndFused) {
  const int64_t n = 5, d = 37;
  const Tensor x = random_tensor({n, d}, 2), w = random_tensor({d}, 3, 0.1f),
               res0 = random_tensor({n, d}, 4);
  for (bool zc : {true, false}) {
    for (bool fused : {false, true}) {
      Tensor out = Tensor::zeros({n, d}, DType::kF32), res = Tensor::zeros({n, d}, DType::kF32);
      res.copy_from(res0);
      kernels::rms_norm({.x = x,
                         .weight = w,
                         .out = out,
                         .residual = fused ? res : Tensor(),
                         .eps = 1e-6f,
                         .zero_centred = zc},
                        kCtx);
      for (int64_t t = 0; t < n; ++t) {
        std::vector<double> r(d), ref(d);
        double ss = 0;
        for (int64_t i = 0; i < d; ++i) {
          r[i] = x.data<float>()[t * d + i] + (fused ? res0.data<float>()[t * d + i] : 0.0);
          ss += r[i] * r[i];
        }
        const double inv = 1.0 / std::sqrt(ss / d + 1e-6);
        for (int64_t i = 0; i < d; ++i)
          ref[i] = r[i] * inv * ((zc ? 1.0 : 0.0) + w.data<float>()[i]);
        EXPECT_LT(max_abs_diff(out.data<float>() + t * d, ref.data(), d), 1e-5);
        if (fused) {
          EXPECT_LT(max_abs_diff(res.data<float>() + t * d, r.data(), d), 1e-6);
        }
      }
    }
  }
}

TEST(RefKernels, GatedRmsNormNormBeforeGate) {
  const int64_t n = 3, h = 2, d = 19;
  const Tensor o = random_tensor({n, h, d}, 5), z = random_tensor({n, h, d}, 6),
               w = random_tensor({d}, 7);
  Tensor out = Tensor::zeros({n, h, d}, DType::kF32);
  kernels::gated_rms_norm({.o = o, .z = z, .weight = w, .out = out, .eps = 1e-6f}, kCtx);
  for (int64_t r = 0; r < n * h; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += std::pow(o.data<float>()[r * d + i], 2);
    const double inv = 1.0 / std::sqrt(ss / d + 1e-6);
    std::vector<double> ref(d);
    for (int64_t i = 0; i < d; ++i) {
      const double zi = z.data<float>()[r * d + i];
      ref[i] = o.data<float>()[r * d + i] * inv * w.data<float>()[i] * zi / (1 + std::exp(-zi));
    }
    EXPECT_LT(max_abs_diff(out.data<float>() + r * d, ref.data(), d), 1e-5);
  }
}

TEST(RefKernels, LinearMatchesDoubleAndIsRowInvariant) {
  const int64_t n = 9, in = 131, outf = 23;
  const Tensor x = random_tensor({n, in}, 8);
  for (DType wt : {DType::kF32, DType::kBF16}) {
    const Tensor wf = random_tensor({outf, in}, 9, 0.05f);
    const Tensor w = wt == DType::kBF16 ? to_bf16(wf) : wf;
    const Tensor wref = w.to_f32();
    Tensor y = Tensor::zeros({n, outf}, DType::kF32);
    kernels::linear({.x = x, .weight = w, .out = y}, kCtx);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> ref(outf, 0.0);
      for (int64_t f = 0; f < outf; ++f)
        for (int64_t i = 0; i < in; ++i)
          ref[f] +=
              static_cast<double>(x.data<float>()[t * in + i]) * wref.data<float>()[f * in + i];
      EXPECT_LT(max_abs_diff(y.data<float>() + t * outf, ref.data(), outf), 1e-5);
    }
    // The vectorised 4-row path computes exactly ref::dot (the readable specification).
    kernels::ref::with_weight_type(w, [&](const auto* wp) {
      for (int64_t t = 0; t < n; ++t)
        for (int64_t f = 0; f < outf; ++f) {
          const float expect = kernels::ref::dot(x.data<float>() + t * in, wp + f * in, in);
          EXPECT_EQ(std::memcmp(&expect, y.data<float>() + t * outf + f, 4), 0) << t << "," << f;
        }
    });
    // Each row alone (n_tokens = 1) is bit-identical to the same row in the 9-row call.
    for (int64_t t = 0; t < n; ++t) {
      Tensor y1 = Tensor::zeros({1, outf}, DType::kF32);
      kernels::linear({.x = x.slice(0, t, t + 1), .weight = w, .out = y1}, kCtx);
      EXPECT_EQ(std::memcmp(y1.data<float>(), y.data<float>() + t * outf, outf * 4), 0)
          << "row " << t;
    }
  }
}

// Rows of gate and up [inter, in] interleaved in groups of 8 (the pair layout of
// LinearEpilogue::kSwiGluPairs), spelled out here independently of the loader and swiglu.h.
Tensor interleave_pairs(const Tensor& gate, const Tensor& up) {
  const int64_t inter = gate.dim(0), in = gate.dim(1);
  Tensor w = Tensor::zeros({2 * inter, in}, gate.dtype());
  const int64_t es = dtype_size(gate.dtype());
  for (int64_t f = 0; f < inter; ++f) {
    const int64_t row = 16 * (f / 8) + f % 8;
    std::memcpy(static_cast<char*>(w.raw()) + row * in * es,
                static_cast<const char*>(gate.raw()) + f * in * es, in * es);
    std::memcpy(static_cast<char*>(w.raw()) + (row + 8) * in * es,
                static_cast<const char*>(up.raw()) + f * in * es, in * es);
  }
  return w;
}

// The swiglu epilogue equals linear with gate_proj, linear with up_proj, then swiglu, bit for bit.
TEST(RefKernels, LinearSwigluEpilogueIsLinearThenSwiglu) {
  uint64_t seed = 100;
  for (DType wt : {DType::kF32, DType::kBF16}) {
    for (int64_t n : {1, 2, 5, 19}) {
      for (int64_t in : {40, 64}) {
        for (int64_t inter : {8, 24}) {
          const Tensor x = random_tensor({n, in}, seed++);
          Tensor gate = random_tensor({inter, in}, seed++, 0.2f);
          Tensor up = random_tensor({inter, in}, seed++, 0.2f);
          if (wt == DType::kBF16) {
            gate = to_bf16(gate);
            up = to_bf16(up);
          }
          const Tensor w = interleave_pairs(gate, up);
          Tensor out = Tensor::zeros({n, inter}, DType::kF32);
          Tensor scratch = Tensor::zeros({n, 2 * inter}, DType::kF32);
          kernels::linear({.x = x,
                           .weight = w,
                           .out = out,
                           .epilogue = kernels::LinearEpilogue::kSwiGluPairs,
                           .scratch = scratch},
                          kCtx);
          Tensor yg = Tensor::zeros({n, inter}, DType::kF32);
          Tensor yu = Tensor::zeros({n, inter}, DType::kF32);
          Tensor expect = Tensor::zeros({n, inter}, DType::kF32);
          kernels::linear({.x = x, .weight = gate, .out = yg}, kCtx);
          kernels::linear({.x = x, .weight = up, .out = yu}, kCtx);
          kernels::swiglu({.gate = yg, .up = yu, .out = expect}, kCtx);
          EXPECT_EQ(std::memcmp(out.data<float>(), expect.data<float>(), n * inter * 4), 0)
              << "weight=" << dtype_name(wt) << ",n_tokens=" << n << ",in=" << in
              << ",inter=" << inter;
        }
      }
    }
  }
  // Misuse names what was expected: no scratch; a row count that is not whole 16-row groups.
  const Tensor x = random_tensor({2, 40}, 1), w = random_tensor({24, 40}, 2);
  Tensor out = Tensor::zeros({2, 12}, DType::kF32), scratch = Tensor::zeros({2, 24}, DType::kF32);
  const auto epi = kernels::LinearEpilogue::kSwiGluPairs;
  EXPECT_THROW(kernels::linear({.x = x, .weight = w, .out = out, .epilogue = epi}, kCtx), Error);
  EXPECT_THROW(
      kernels::linear({.x = x, .weight = w, .out = out, .epilogue = epi, .scratch = scratch}, kCtx),
      Error);
}

TEST(RefKernels, PartialNeoxRope) {
  const int64_t n = 4, h = 3, d = 16, rd = 8;
  const float theta = 1e7f;
  const Tensor x0 = random_tensor({n, h, d}, 10);
  Tensor x = Tensor::zeros({n, h, d}, DType::kF32);
  x.copy_from(x0);
  const Tensor pos = i32_tensor({0, 5, 17, 4000});
  kernels::rope({.x = x, .positions = pos, .rotary_dim = rd, .theta = theta}, kCtx);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t hh = 0; hh < h; ++hh) {
      const float* a = x0.data<float>() + (t * h + hh) * d;
      std::vector<double> ref(a, a + d);
      for (int64_t i = 0; i < rd / 2; ++i) {
        const double ang =
            pos.data<int32_t>()[t] * std::pow(static_cast<double>(theta), -2.0 * i / rd);
        ref[i] = a[i] * std::cos(ang) - a[i + rd / 2] * std::sin(ang);
        ref[i + rd / 2] = a[i + rd / 2] * std::cos(ang) + a[i] * std::sin(ang);
      }
      EXPECT_LT(max_abs_diff(x.data<float>() + (t * h + hh) * d, ref.data(), d),
                2e-3);  // fp32 angle at pos 4000
      for (int64_t i = rd; i < d; ++i) EXPECT_EQ(x.data<float>()[(t * h + hh) * d + i], a[i]);
    }
  }
}

// RMSNorm with rope_dim > 0 is the norm followed by rope() on its output, bit for bit.
TEST(RefKernels, RmsNormWithRopeIsNormThenRope) {
  const int64_t n = 3, h = 2, d = 16;
  const Tensor x = random_tensor({n, h, d}, 14), w = random_tensor({d}, 15, 0.3f);
  const Tensor pos = i32_tensor({3, 70, 5000});
  Tensor fused = Tensor::zeros({n, h, d}, DType::kF32),
         twice = Tensor::zeros({n, h, d}, DType::kF32);
  kernels::rms_norm(
      {.x = x, .weight = w, .out = fused, .rope_positions = pos, .rope_dim = 8, .rope_theta = 1e7f},
      kCtx);
  kernels::rms_norm({.x = x, .weight = w, .out = twice}, kCtx);
  kernels::rope({.x = twice, .positions = pos, .rotary_dim = 8, .theta = 1e7f}, kCtx);
  EXPECT_EQ(std::memcmp(fused.data<float>(), twice.data<float>(), n * h * d * sizeof(float)), 0);
  Tensor plain = Tensor::zeros({n, h, d}, DType::kF32);
  kernels::rms_norm({.x = x, .weight = w, .out = plain}, kCtx);
  EXPECT_NE(std::memcmp(fused.data<float>(), plain.data<float>(), n * h * d * sizeof(float)), 0);
}

TEST(RefKernels, SwigluAndArgmax) {
  const Tensor g = random_tensor({2, 11}, 11), u = random_tensor({2, 11}, 12);
  Tensor out = Tensor::zeros({2, 11}, DType::kF32);
  kernels::swiglu({.gate = g, .up = u, .out = out}, kCtx);
  for (int i = 0; i < 22; ++i) {
    const double gi = g.data<float>()[i];
    EXPECT_NEAR(out.data<float>()[i], gi / (1 + std::exp(-gi)) * u.data<float>()[i], 1e-6);
  }
  Tensor logits = Tensor::zeros({2, 5}, DType::kF32);
  const float rows[10] = {1, 3, 3, -1, 0, NAN, -2, -1, -1, -5};
  std::memcpy(logits.data<float>(), rows, sizeof(rows));
  Tensor ids = Tensor::zeros({2}, DType::kI32);
  kernels::argmax({.logits = logits, .out = ids}, kCtx);
  EXPECT_EQ(ids.data<int32_t>()[0], 1);  // tie goes to the lowest index
  EXPECT_EQ(ids.data<int32_t>()[1], 2);  // NaN never wins
}

}  // namespace
}  // namespace tandem
