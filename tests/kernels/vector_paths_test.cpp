// The reference kernels' vectorised paths against plain scalar statements of the same arithmetic,
// bit for bit: exp / silu / sigmoid (8 lanes vs one), the dot helpers vs ref::dot, the FMA rank
// update vs one FMA chain per element, linear's register tiles for every row count and weight
// type vs ref::dot, the gated delta rule's recurrent passes vs its per-column formula, conv1d's
// channel blocks vs the per-channel formula, and argmax's lanes vs the first-maximum scan.
// Awkward sizes (tails of 8 lanes, partial tiles and blocks) and two threads throughout.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/argmax/argmax.h"
#include "kernels/conv1d/conv1d.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/linear/linear.h"
#include "kernels/ref_common.h"

namespace tandem {
namespace {

using namespace testing;
namespace ref = kernels::ref;
const ExecContext kOne{.device = Device::kCpu, .n_threads = 1};
const ExecContext kTwo{.device = Device::kCpu, .n_threads = 2};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (a != a && b != b); }
bool same_bits(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}

std::vector<float> awkward_floats() {
  std::vector<float> v = {0.f,         -0.f,      1.f,          -1.f,      88.7228394f,
                          88.72283f,   88.5f,     -87.3365479f, -87.3365f, -87.33f,
                          -87.5f,      -103.f,    1e-30f,       -1e-30f,   0.5f * 0.6931472f,
                          -0.6931472f, 20.f,      -20.f,        50.f,      -50.f,
                          INFINITY,    -INFINITY, NAN,          126.f,     -126.f};
  const Tensor r = random_tensor({4096}, 7, 12.f);
  v.insert(v.end(), r.data<float>(), r.data<float>() + r.numel());
  while (v.size() % 8 != 0) v.push_back(0.25f);
  return v;
}

TEST(VectorPaths, ExpSiluSigmoidLanesEqualScalars) {
  const std::vector<float> x = awkward_floats();
  const int64_t n = static_cast<int64_t>(x.size());
  for (float v : x) {  // accuracy of the reference's exp (Cephes expf, about 1 ulp)
    if (!(v > -87.f && v < 88.f)) continue;
    const double e = std::exp(static_cast<double>(v));
    const double ulp = std::nextafter(static_cast<float>(e), INFINITY) - static_cast<float>(e);
    EXPECT_LE(std::fabs(ref::exp(v) - e), 2 * ulp) << v;
  }
  EXPECT_EQ(ref::exp(-100.f), 0.f);
  EXPECT_EQ(ref::exp(100.f), INFINITY);
  EXPECT_TRUE(std::isnan(ref::exp(NAN)));
  std::vector<float> y(n);
  ref::silu_rows(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(same_bits(y[i], ref::silu(x[i]))) << x[i];
  ref::silu_rows(x.data() + 3, y.data(), n - 3);  // unaligned, with a tail
  for (int64_t i = 0; i < n - 3; ++i) EXPECT_TRUE(same_bits(y[i], ref::silu(x[i + 3])));
#if defined(__AVX2__) && defined(__FMA__)
  for (int64_t i = 0; i < n; i += 8) {
    float e[8], s[8];
    _mm256_storeu_ps(e, ref::exp8(_mm256_loadu_ps(x.data() + i)));
    _mm256_storeu_ps(s, ref::sigmoid8(_mm256_loadu_ps(x.data() + i)));
    for (int l = 0; l < 8; ++l) {
      EXPECT_TRUE(same_bits(e[l], ref::exp(x[i + l]))) << x[i + l];
      EXPECT_TRUE(same_bits(s[l], ref::sigmoid(x[i + l]))) << x[i + l];
    }
  }
#endif
}

TEST(VectorPaths, DotHelpersEqualDot) {
  for (int64_t n : {1, 7, 8, 9, 16, 131, 320}) {
    const Tensor x = random_tensor({n}, 1), ys = random_tensor({8, n}, 2);
    const float* y[8];
    for (int r = 0; r < 8; ++r) y[r] = ys.data<float>() + r * n;
    float out[8];
    ref::dot8_f32(x.data<float>(), y, n, out);
    for (int r = 0; r < 8; ++r) {
      const float expect = ref::dot(x.data<float>(), y[r], n);
      EXPECT_TRUE(same_bits(out[r], expect)) << "n=" << n << ",r=" << r;
      EXPECT_TRUE(same_bits(ref::dot_f32(x.data<float>(), y[r], n), expect)) << "n=" << n;
    }
  }
}

// C[m, j] = fma(A(m, p), B[p, j], C[m, j]) for p in order: the specification, spelled out.
TEST(VectorPaths, FmaRankUpdateIsOneChainPerElement) {
  uint64_t seed = 10;
  for (int64_t M : {1, 3, 4, 5, 9, 17})
    for (int64_t P : {0, 1, 5, 64})
      for (int64_t N : {1, 7, 16, 17, 64, 65, 130})
        for (bool transposed : {false, true}) {
          const Tensor a = random_tensor({M * P + 1}, seed++),
                       b = random_tensor({P * N + 1}, seed++);
          const Tensor c0 = random_tensor({M, N + 3}, seed++);  // row stride N + 3
          const int64_t a_m = transposed ? 1 : P, a_p = transposed ? M : 1, ldc = N + 3;
          Tensor c = Tensor::zeros({M, N + 3}, DType::kF32);
          c.copy_from(c0);
          ref::fma_rank_update(c.data<float>(), ldc, a.data<float>(), a_m, a_p, b.data<float>(), N,
                               M, P, N);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t j = 0; j < N; ++j) {
              float e = c0.data<float>()[m * ldc + j];
              for (int64_t p = 0; p < P; ++p)
                e = std::fma(a.data<float>()[m * a_m + p * a_p], b.data<float>()[p * N + j], e);
              ASSERT_TRUE(same_bits(c.data<float>()[m * ldc + j], e))
                  << "M=" << M << ",P=" << P << ",N=" << N << ",transposed=" << transposed << " at "
                  << m << "," << j;
            }
        }
}

Tensor to_f16(const Tensor& f) {
  Tensor h = Tensor::zeros(f.shape(), DType::kF16);
  for (int64_t i = 0; i < f.numel(); ++i) h.data<f16>()[i] = f32_to_f16(f.data<float>()[i]);
  return h;
}

// Every row count takes its own register tile (1 x 8 ... 8 x 1 features, 3 x 4 beyond 8 rows):
// each output is ref::dot bit for bit, with one thread or two, and so is every row alone.
TEST(VectorPaths, LinearTilesEqualDotForEveryRowCount) {
  for (DType wt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t in : {13, 131, 320}) {
      const int64_t outf = 37;
      const Tensor wf = random_tensor({outf, in}, 90 + in, 0.05f);
      const Tensor w = wt == DType::kBF16 ? to_bf16(wf) : wt == DType::kF16 ? to_f16(wf) : wf;
      for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 17}) {
        const Tensor xw = random_tensor({n, in + 5}, 3 * n + in);
        const Tensor x = xw.slice(1, 2, 2 + in);  // rows in + 5 apart, unaligned
        for (const ExecContext* ctx : {&kOne, &kTwo}) {
          Tensor y = Tensor::zeros({n, outf}, DType::kF32);
          kernels::linear({.x = x, .weight = w, .out = y}, *ctx);
          ref::with_weight_type(w, [&](const auto* wp) {
            for (int64_t t = 0; t < n; ++t)
              for (int64_t f = 0; f < outf; ++f) {
                const float expect = ref::dot(x.data<float>() + t * x.stride(0), wp + f * in, in);
                ASSERT_TRUE(same_bits(expect, y.data<float>()[t * outf + f]))
                    << "weight=" << dtype_name(wt) << ",in=" << in << ",n_tokens=" << n
                    << ",threads=" << ctx->n_threads << " at " << t << "," << f;
              }
          });
        }
      }
    }
  }
}

TEST(VectorPaths, LinearAddEpilogueIsOutPlusY) {
  const int64_t n = 5, in = 40, outf = 24;
  const Tensor x = random_tensor({n, in}, 1), w = to_bf16(random_tensor({outf, in}, 2, 0.1f));
  const Tensor out0 = random_tensor({n, outf}, 3);
  Tensor out = Tensor::zeros({n, outf}, DType::kF32), y = Tensor::zeros({n, outf}, DType::kF32);
  out.copy_from(out0);
  Tensor scratch = Tensor::zeros({n, outf}, DType::kF32);
  kernels::linear({.x = x,
                   .weight = w,
                   .out = out,
                   .epilogue = kernels::LinearEpilogue::kAddToOut,
                   .scratch = scratch},
                  kTwo);
  kernels::linear({.x = x, .weight = w, .out = y}, kOne);
  for (int64_t i = 0; i < n * outf; ++i)
    EXPECT_TRUE(same_bits(out.data<float>()[i], out0.data<float>()[i] + y.data<float>()[i]));
}

// The recurrent gated delta rule as the test states it (gated_delta_rule_ref.cpp's formula).
struct GdrSpec {
  int64_t hk, hv, dk, dv;
  std::vector<float> a_log, dt_bias;
  std::vector<float> norm(const float* x, float scale) const {
    const float inv = 1.f / std::sqrt(ref::dot(x, x, dk) + 1e-6f);
    std::vector<float> y(dk);
    for (int64_t i = 0; i < dk; ++i) y[i] = (x[i] * inv) * scale;
    return y;
  }
  // One token of head h on state S [dk, dv]; writes o [dv] when q is given.
  void step(float* S, const float* q, const float* k, const float* v, float a, float b, int64_t h,
            float* o) const {
    const std::vector<float> kn = norm(k, 1.f);
    const std::vector<float> qn = q ? norm(q, 1.f / std::sqrt(static_cast<float>(dk))) : kn;
    const float g = -std::exp(a_log[h]) * ref::softplus(a + dt_bias[h]);
    const float decay = ref::exp(g), beta = ref::sigmoid(b);
    const float kq = ref::dot(kn.data(), qn.data(), dk);
    for (int64_t j = 0; j < dv; ++j) {
      float w = 0.f, z = 0.f;
      for (int64_t i = 0; i < dk; ++i) {
        S[i * dv + j] = decay * S[i * dv + j];
        w = std::fma(S[i * dv + j], kn[i], w);
        z = std::fma(S[i * dv + j], qn[i], z);
      }
      const float u = beta * (v[j] - w);
      if (o != nullptr) o[j] = std::fma(kq, u, z);
      for (int64_t i = 0; i < dk; ++i) S[i * dv + j] = std::fma(kn[i], u, S[i * dv + j]);
    }
  }
};

// Two sequences in one launch: a first call of 3 rows, then a call that folds 2 of them and runs
// 2 more; outputs and committed states equal the spec's token-by-token run, bit for bit, for
// d_v with vector blocks and column tails.
TEST(VectorPaths, GatedDeltaRuleRecurrentEqualsSpecBitwise) {
  for (int64_t dk : {16, 128})
    for (int64_t dv : {13, 40, 128}) {
      const int64_t hk = 1, hv = 2, rows = 5, slots = 3;
      GdrSpec spec{hk, hv, dk, dv, {0.3f, 2.6f}, {0.9f, 1.1f}};
      const Tensor q = random_tensor({2 * rows, hk, dk}, dk + dv),
                   k = random_tensor({2 * rows, hk, dk}, dk + dv + 1),
                   v = random_tensor({2 * rows, hv, dv}, dk + dv + 2),
                   a = random_tensor({2 * rows, hv}, dk + dv + 3),
                   b = random_tensor({2 * rows, hv}, dk + dv + 4);
      Tensor a_log = Tensor::zeros({hv}, DType::kF32), dt_bias = Tensor::zeros({hv}, DType::kF32);
      for (int64_t h = 0; h < hv; ++h)
        a_log.data<float>()[h] = spec.a_log[h], dt_bias.data<float>()[h] = spec.dt_bias[h];
      const Tensor init = random_tensor({slots, hv, dk, dv}, 5, 0.3f);
      Tensor state = Tensor::zeros({slots, hv, dk, dv}, DType::kF32);
      state.copy_from(init);
      Tensor replay =
          Tensor::zeros({slots, 2, 4, kernels::gdr_replay_width(hk, dk, hv, dv)}, DType::kF32);
      Tensor out = Tensor::zeros({2 * rows, hv, dv}, DType::kF32);
      // Sequence A (slot 2) owns rows [0, 5) of each call, sequence B (slot 0) rows [5, 10).
      auto call = [&](int32_t rows_a, int32_t rows_b, int32_t acc_a, int32_t acc_b,
                      int32_t parity) {
        std::vector<int32_t> start{0, rows_a, rows_a + rows_b};
        kernels::gated_delta_rule({.q = q,
                                   .k = k,
                                   .v = v,
                                   .a = a,
                                   .b = b,
                                   .a_log = a_log,
                                   .dt_bias = dt_bias,
                                   .state = state,
                                   .replay = replay,
                                   .out = out,
                                   .seqs = {2, std::max(rows_a, rows_b), i32_tensor(start)},
                                   .slot = i32_tensor({2, 0}),
                                   .n_acc = i32_tensor({acc_a, acc_b}),
                                   .parity = i32_tensor({parity, parity}),
                                   .start_position = i32_tensor({0, 0})},
                                  kTwo);
      };
      call(3, 2, 0, 0, 0);  // A rows 0..2, B rows 3..4
      // The spec: per sequence, token by token from its initial state.
      auto expect = [&](int64_t slot, int64_t r0, int64_t n, std::vector<float>& S,
                        std::vector<float>& o) {
        o.assign(n * hv * dv, 0.f);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t h = 0; h < hv; ++h)
            spec.step(S.data() + h * dk * dv, q.data<float>() + (r0 + t) * dk,
                      k.data<float>() + (r0 + t) * dk, v.data<float>() + ((r0 + t) * hv + h) * dv,
                      a.data<float>()[(r0 + t) * hv + h], b.data<float>()[(r0 + t) * hv + h], h,
                      o.data() + (t * hv + h) * dv);
      };
      std::vector<float> SA(init.data<float>() + 2 * hv * dk * dv,
                            init.data<float>() + 3 * hv * dk * dv);
      std::vector<float> SB(init.data<float>(), init.data<float>() + hv * dk * dv), oa, ob;
      std::vector<float> SA0 = SA, SB0 = SB;
      expect(2, 0, 3, SA, oa);
      expect(0, 3, 2, SB, ob);
      const std::string where = "d_k=" + std::to_string(dk) + ",d_v=" + std::to_string(dv);
      EXPECT_TRUE(same_bits(out.data<float>(), oa.data(), 3 * hv * dv)) << where;
      EXPECT_TRUE(same_bits(out.data<float>() + 3 * hv * dv, ob.data(), 2 * hv * dv)) << where;
      // The rows' states are not stored.
      EXPECT_TRUE(same_bits(state.data<float>(), init.data<float>(), state.numel())) << where;
      // Next call: A folds 2 of its 3 rows, B both of its 2; then each runs rows from there.
      // The call's rows: A rows [0, 2) read rows 0..1 of q..b again (fresh inputs in the spec).
      call(2, 3, 2, 2, 1);
      SA = SA0, SB = SB0;
      expect(2, 0, 2, SA, oa);  // fold A: its first 2 rows of the first call (rows 0, 1)
      expect(0, 3, 2, SB, ob);  // fold B: rows 3, 4
      EXPECT_TRUE(same_bits(state.data<float>() + 2 * hv * dk * dv, SA.data(), hv * dk * dv))
          << where << " committed A";
      EXPECT_TRUE(same_bits(state.data<float>(), SB.data(), hv * dk * dv))
          << where << " committed B";
      std::vector<float> SA1 = SA, SB1 = SB;
      expect(2, 0, 2, SA1, oa);  // A's rows of this call: rows 0, 1
      expect(0, 2, 3, SB1, ob);  // B's rows: rows 2, 3, 4
      EXPECT_TRUE(same_bits(out.data<float>(), oa.data(), 2 * hv * dv)) << where;
      EXPECT_TRUE(same_bits(out.data<float>() + 2 * hv * dv, ob.data(), 3 * hv * dv)) << where;
    }
}

// conv1d per channel, as the test states it: acc = sum_j w[c, j] seq[t + j] (multiply, then add,
// j in order), y = silu(acc), and the new history.
TEST(VectorPaths, Conv1dChannelBlocksEqualSpecBitwise) {
  const int64_t channels = 70, kc = 4, window = kc - 1, hist_len = window + 4;  // 64 + 6
  for (auto mode : {kernels::ConvHistoryMode::kSpec, kernels::ConvHistoryMode::kCompact}) {
    const int64_t n = mode == kernels::ConvHistoryMode::kSpec ? 3 : 9;
    const Tensor x = random_tensor({2 * n, channels}, 40);
    const Tensor w = to_bf16(random_tensor({channels, 1, kc}, 41, 0.5f));
    const Tensor h0 = random_tensor({2, channels, hist_len}, 42);
    Tensor hist = Tensor::zeros({2, channels, hist_len}, DType::kF32);
    hist.copy_from(h0);
    Tensor out = Tensor::zeros({2 * n, channels}, DType::kF32);
    const int32_t n_acc1 = mode == kernels::ConvHistoryMode::kSpec ? 2 : 0;
    kernels::conv1d(
        {.x = x,
         .weight = w,
         .history = hist,
         .out = out,
         .seqs = {2, n, i32_tensor({0, static_cast<int32_t>(n), static_cast<int32_t>(2 * n)})},
         .slot = i32_tensor({1, 0}),
         .n_acc = i32_tensor({0, n_acc1}),
         .mode = mode},
        kTwo);
    for (int64_t s = 0; s < 2; ++s) {
      const int64_t slot = 1 - s, o = s == 0 ? 0 : n_acc1;
      for (int64_t c = 0; c < channels; ++c) {
        std::vector<float> seq;
        for (int64_t j = 0; j < window; ++j)
          seq.push_back(h0.data<float>()[(slot * channels + c) * hist_len + o + j]);
        for (int64_t t = 0; t < n; ++t) seq.push_back(x.data<float>()[(s * n + t) * channels + c]);
        for (int64_t t = 0; t < n; ++t) {
          float acc = 0.f;
          for (int64_t j = 0; j < kc; ++j)
            acc += bf16_to_f32(w.data<bf16>()[c * kc + j]) * seq[t + j];
          ASSERT_TRUE(same_bits(out.data<float>()[(s * n + t) * channels + c], ref::silu(acc)))
              << "mode " << static_cast<int>(mode) << " seq " << s << " channel " << c;
        }
        const float* hc = hist.data<float>() + (slot * channels + c) * hist_len;
        if (mode == kernels::ConvHistoryMode::kSpec) {
          EXPECT_TRUE(same_bits(hc, seq.data(), window + n));
        } else {
          EXPECT_TRUE(same_bits(hc, seq.data() + n, window));
        }
      }
    }
  }
}

TEST(VectorPaths, ArgmaxLanesKeepTheFirstMaximum) {
  auto first_max = [](const std::vector<float>& l) {  // the scan, spelled out
    int32_t best = 0;
    float bv = -INFINITY;
    for (size_t i = 0; i < l.size(); ++i)
      if (l[i] > bv) bv = l[i], best = static_cast<int32_t>(i);
    return best;
  };
  std::vector<std::vector<float>> rows;
  const Tensor r = random_tensor({8192}, 50);
  std::vector<float> big(r.data<float>(), r.data<float>() + 8192);
  big[5000] = big[77] = 9.f;  // a tie across lanes: 77 wins
  rows.push_back(big);
  big[3] = NAN, big[4096] = NAN;
  rows.push_back(big);
  rows.push_back(std::vector<float>(37, -INFINITY));  // nothing beats -inf: index 0
  rows.push_back(std::vector<float>(37, NAN));        // NaN never wins: index 0
  std::vector<float> tail(37, 1.f);
  tail[4] = tail[36] = 2.f;  // the maximum in a lane and again in the scalar tail
  rows.push_back(tail);
  std::vector<float> zeros(19, -0.f);
  zeros[12] = 0.f;  // -0 and +0 tie: the first wins
  rows.push_back(zeros);
  for (const auto& row : rows) {
    Tensor logits = Tensor::zeros({1, static_cast<int64_t>(row.size())}, DType::kF32);
    std::memcpy(logits.data<float>(), row.data(), row.size() * 4);
    Tensor ids = Tensor::zeros({1}, DType::kI32);
    kernels::argmax({.logits = logits, .out = ids}, kOne);
    EXPECT_EQ(ids.data<int32_t>()[0], first_max(row)) << "vocab " << row.size();
  }
}

}  // namespace
}  // namespace tandem
