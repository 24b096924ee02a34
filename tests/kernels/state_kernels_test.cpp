// Reference kernels that carry state, over batches of sequences: attention over a paged KV cache
// (vs a double softmax, GQA, gate, per-sequence kv_len and block tables, batch invariance), the
// conv1d speculative history in a slot pool (outputs and window offsets), and the gated delta rule
// (recurrent vs a double formula; the fold of accepted replay rows vs token-by-token steps,
// bitwise; batch invariance; chunked vs recurrent on lengths 1, 63, 64, 65, 200).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/attention/attention.h"
#include "kernels/conv1d/conv1d.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/kv_cache/kv_cache.h"

namespace tandem {
namespace {

using namespace testing;
const ExecContext kCtx{.device = Device::kCpu, .n_threads = 1};

// row_start of sequences with the given row counts, starting at row `first`.
kernels::SeqLayout layout(const std::vector<int32_t>& rows, int32_t first = 0) {
  std::vector<int32_t> start{first};
  int64_t max_rows = 0;
  for (int32_t r : rows) {
    start.push_back(start.back() + r);
    max_rows = std::max<int64_t>(max_rows, r);
  }
  return {static_cast<int64_t>(rows.size()), max_rows, i32_tensor(start)};
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, n * 4) == 0; }

TEST(RefKernels, PagedAttentionBatchMatchesDoubleSoftmax) {
  const int64_t hq = 6, hkv = 2, d = 16, bs = 4, n_blocks = 16, max_blocks = 6;
  // Three sequences: (context, query rows); their pages are interleaved in the pool.
  const std::vector<std::pair<int32_t, int32_t>> seqs{{19, 3}, {5, 1}, {11, 4}};
  const std::vector<std::vector<int32_t>> tables{
      {5, 2, 7, 0, 1, 3}, {9, 15, 15, 15, 15, 15}, {4, 6, 8, 10, 15, 15}};
  Tensor kc = Tensor::zeros({n_blocks, bs, hkv, d}, DType::kF32),
         vc = Tensor::zeros({n_blocks, bs, hkv, d}, DType::kF32);
  std::vector<Tensor> k_all, v_all;
  std::vector<int32_t> table_flat, kv_len, rows;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int32_t len = seqs[s].first;
    k_all.push_back(random_tensor({len, hkv, d}, 20 + s));
    v_all.push_back(random_tensor({len, hkv, d}, 30 + s));
    std::vector<int32_t> slots(len);
    for (int32_t p = 0; p < len; ++p) slots[p] = tables[s][p / bs] * bs + p % bs;
    kernels::kv_cache_write(
        {.k = k_all[s], .v = v_all[s], .slots = i32_tensor(slots), .k_cache = kc, .v_cache = vc},
        kCtx);
    table_flat.insert(table_flat.end(), tables[s].begin(), tables[s].end());
    kv_len.push_back(len);
    rows.push_back(seqs[s].second);
  }
  const Tensor block_tables = i32_tensor(table_flat).reshape({3, max_blocks});
  const int64_t n = 8;
  const Tensor q = random_tensor({n, hq, d}, 40), gate = random_tensor({n, hq, d}, 41);
  Tensor out = Tensor::zeros({n, hq, d}, DType::kF32);
  kernels::attention({.q = q,
                      .gate = gate,
                      .k_cache = kc,
                      .v_cache = vc,
                      .block_tables = block_tables,
                      .kv_len = i32_tensor(kv_len),
                      .out = out,
                      .seqs = layout(rows)},
                     kCtx);
  int64_t row = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto [len, nq] = seqs[s];
    for (int64_t i = 0; i < nq; ++i, ++row) {
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t last = len - nq + i, hk = h / (hq / hkv);
        std::vector<double> sc(last + 1), ref(d, 0.0);
        double m = -1e300, sum = 0;
        for (int64_t j = 0; j <= last; ++j) {
          sc[j] = 0;
          for (int64_t e = 0; e < d; ++e)
            sc[j] += static_cast<double>(q.data<float>()[(row * hq + h) * d + e]) *
                     k_all[s].data<float>()[(j * hkv + hk) * d + e];
          sc[j] /= std::sqrt(static_cast<double>(d));
          m = std::max(m, sc[j]);
        }
        for (int64_t j = 0; j <= last; ++j) sum += sc[j] = std::exp(sc[j] - m);
        for (int64_t j = 0; j <= last; ++j)
          for (int64_t e = 0; e < d; ++e)
            ref[e] += sc[j] / sum * v_all[s].data<float>()[(j * hkv + hk) * d + e];
        for (int64_t e = 0; e < d; ++e)
          ref[e] /= 1 + std::exp(-static_cast<double>(gate.data<float>()[(row * hq + h) * d + e]));
        EXPECT_LT(max_abs_diff(out.data<float>() + (row * hq + h) * d, ref.data(), d), 1e-5)
            << "sequence " << s << " row " << i << " head " << h;
      }
    }
  }
  // Batch invariance: sequence 2's last row alone (a decode step of its own, at row 0 of another
  // launch) has the bits it had as row 7 of the batch.
  Tensor one = Tensor::zeros({1, hq, d}, DType::kF32);
  kernels::attention({.q = q.slice(0, 7, 8),
                      .gate = gate.slice(0, 7, 8),
                      .k_cache = kc,
                      .v_cache = vc,
                      .block_tables = block_tables.slice(0, 2, 3),
                      .kv_len = i32_tensor({11}),
                      .out = one,
                      .seqs = layout({1})},
                     kCtx);
  EXPECT_TRUE(same_bits(one.data<float>(), out.data<float>() + 7 * hq * d, hq * d));
}

// Conv outputs over a full raw sequence x[0..T) with zero history, for comparison.
double conv_reference(const Tensor& x, const Tensor& w, int64_t t, int64_t c) {
  const int64_t kc = w.dim(-1);
  double acc = 0;
  for (int64_t j = 0; j < kc; ++j) {
    const int64_t src = t - kc + 1 + j;
    if (src >= 0)
      acc += static_cast<double>(w.data<float>()[c * kc + j]) * x.data<float>()[src * x.dim(1) + c];
  }
  return acc / (1 + std::exp(-acc));
}

TEST(RefKernels, Conv1dSpecHistoryOffsetsInASlotPool) {
  const int64_t channels = 5, kc = 4, step_rows = 4, total = 12, slot = 2;
  const Tensor x = random_tensor({total, channels}, 30),
               w = random_tensor({channels, 1, kc}, 31, 0.5f);
  Tensor hist = Tensor::zeros({3, channels, kc - 1 + step_rows}, DType::kF32);
  Tensor out = Tensor::zeros({total, channels}, DType::kF32);
  auto run = [&](const Tensor& xs, const Tensor& os, int32_t n_acc, kernels::ConvHistoryMode m) {
    kernels::conv1d({.x = xs,
                     .weight = w,
                     .history = hist,
                     .out = os,
                     .seqs = layout({static_cast<int32_t>(xs.dim(0))}),
                     .slot = i32_tensor({slot}),
                     .n_acc = i32_tensor({n_acc}),
                     .mode = m},
                    kCtx);
  };
  // Prefill 4 tokens (compact), then verify steps of 1 + 3 drafts accepting 3, 1, 4 tokens.
  run(x.slice(0, 0, 4), out.slice(0, 0, 4), 0, kernels::ConvHistoryMode::kCompact);
  int64_t committed = 4;
  int32_t n_acc = 0;
  for (int accept : {3, 1, 4}) {
    Tensor step_x = Tensor::zeros({step_rows, channels}, DType::kF32);
    for (int64_t r = 0; r < step_rows; ++r)
      for (int64_t c = 0; c < channels; ++c)
        step_x.data<float>()[r * channels + c] =
            r < accept ? x.data<float>()[(committed + r) * channels + c]
                       : 100.f + r;  // junk drafts
    Tensor step_out = Tensor::zeros({step_rows, channels}, DType::kF32);
    run(step_x, step_out, n_acc, kernels::ConvHistoryMode::kSpec);
    for (int64_t r = 0; r < accept; ++r)
      for (int64_t c = 0; c < channels; ++c)
        EXPECT_NEAR(step_out.data<float>()[r * channels + c],
                    conv_reference(x, w, committed + r, c), 1e-5)
            << "accept " << accept << " row " << r << " channel " << c;
    n_acc = accept;  // the commit
    committed += accept;
  }
  // The other slots were never touched.
  for (int64_t s : {0, 1})
    for (int64_t i = 0; i < channels * (kc - 1 + step_rows); ++i)
      EXPECT_EQ(hist.select(0, s).data<float>()[i], 0.f);
}

struct GdrCase {
  Tensor q, k, v, a, b, a_log, dt_bias;
  int64_t hk, hv, dk, dv;
};

GdrCase gdr_case(int64_t n, int64_t hk, int64_t hv, int64_t dk, int64_t dv, uint64_t seed) {
  GdrCase c{random_tensor({n, hk, dk}, seed),
            random_tensor({n, hk, dk}, seed + 1),
            random_tensor({n, hv, dv}, seed + 2),
            random_tensor({n, hv}, seed + 3),
            random_tensor({n, hv}, seed + 4),
            Tensor::zeros({hv}, DType::kF32),
            random_tensor({hv}, seed + 5, 0.5f),
            hk,
            hv,
            dk,
            dv};
  for (int64_t h = 0; h < hv; ++h)
    c.a_log.data<float>()[h] = std::log(1.f + 15.f * h / std::max<int64_t>(hv - 1, 1));
  return c;
}

// A GDN slot pool: committed states and replay rows.
struct GdrPool {
  Tensor state, replay;
  GdrPool(const GdrCase& c, int64_t slots, int64_t step_rows)
      : state(Tensor::zeros({slots, c.hv, c.dk, c.dv}, DType::kF32)),
        replay(
            Tensor::zeros({slots, 2, step_rows, kernels::gdr_replay_width(c.hk, c.dk, c.hv, c.dv)},
                          DType::kF32)) {}
};

// One call over rows [r0, r0 + n) of c for each (slot, n_acc, parity) sequence, rows in order.
struct GdrSeq {
  int32_t rows, slot, n_acc, parity, start;
};
void run_gdr(const GdrCase& c, GdrPool& pool, const Tensor& out, kernels::GdrMode mode,
             const std::vector<GdrSeq>& seqs, int32_t first_row = 0) {
  std::vector<int32_t> rows, slot, n_acc, parity, start;
  for (const GdrSeq& s : seqs) {
    rows.push_back(s.rows), slot.push_back(s.slot), n_acc.push_back(s.n_acc);
    parity.push_back(s.parity), start.push_back(s.start);
  }
  kernels::gated_delta_rule({.q = c.q,
                             .k = c.k,
                             .v = c.v,
                             .a = c.a,
                             .b = c.b,
                             .a_log = c.a_log,
                             .dt_bias = c.dt_bias,
                             .state = pool.state,
                             .replay = pool.replay,
                             .out = out,
                             .seqs = layout(rows, first_row),
                             .slot = i32_tensor(slot),
                             .n_acc = i32_tensor(n_acc),
                             .parity = i32_tensor(parity),
                             .start_position = i32_tensor(start),
                             .mode = mode},
                            kCtx);
}

TEST(RefKernels, GatedDeltaRuleRecurrentMatchesFormulaAndFoldCommits) {
  const int64_t n = 6;
  const GdrCase c = gdr_case(n, 1, 2, 8, 4, 40);
  const int64_t hv = c.hv, dk = c.dk, dv = c.dv;
  GdrPool pool(c, 2, n);
  Tensor out = Tensor::zeros({n, hv, dv}, DType::kF32);
  run_gdr(c, pool, out, kernels::GdrMode::kRecurrent, {{6, 1, 0, 0, 0}});
  std::vector<std::vector<double>> after_all(hv);
  for (int64_t h = 0; h < hv; ++h) {
    std::vector<double> S(dk * dv, 0.0);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> q(dk), k(dk);
      double qs = 0, ks = 0;
      for (int64_t i = 0; i < dk; ++i)
        qs += std::pow(c.q.data<float>()[t * dk + i], 2),
            ks += std::pow(c.k.data<float>()[t * dk + i], 2);
      for (int64_t i = 0; i < dk; ++i) {
        q[i] = c.q.data<float>()[t * dk + i] / std::sqrt(qs + 1e-6) /
               std::sqrt(static_cast<double>(dk));
        k[i] = c.k.data<float>()[t * dk + i] / std::sqrt(ks + 1e-6);
      }
      const double x = c.a.data<float>()[t * hv + h] + c.dt_bias.data<float>()[h];
      const double g =
          -std::exp(static_cast<double>(c.a_log.data<float>()[h])) * std::log1p(std::exp(x));
      const double beta = 1 / (1 + std::exp(-static_cast<double>(c.b.data<float>()[t * hv + h])));
      for (double& s : S) s *= std::exp(g);
      for (int64_t j = 0; j < dv; ++j) {
        double kv = 0;
        for (int64_t i = 0; i < dk; ++i) kv += S[i * dv + j] * k[i];
        const double u = beta * (c.v.data<float>()[(t * hv + h) * dv + j] - kv);
        for (int64_t i = 0; i < dk; ++i) S[i * dv + j] += k[i] * u;
      }
      for (int64_t j = 0; j < dv; ++j) {
        double o = 0;
        for (int64_t i = 0; i < dk; ++i) o += S[i * dv + j] * q[i];
        EXPECT_NEAR(out.data<float>()[(t * hv + h) * dv + j], o, 1e-5)
            << "t " << t << " head " << h;
      }
    }
    after_all[h] = S;
  }
  // The rows' states are not stored: the committed state is still zero.
  for (int64_t i = 0; i < pool.state.select(0, 1).numel(); ++i)
    ASSERT_EQ(pool.state.select(0, 1).data<float>()[i], 0.f);
  // A fold-only call (no rows) with n_acc = 6 commits all six rows: the formula's final state.
  run_gdr(c, pool, out, kernels::GdrMode::kRecurrent, {{0, 1, 6, 1, 0}});
  for (int64_t h = 0; h < hv; ++h)
    EXPECT_LT(max_abs_diff(pool.state.select(0, 1).data<float>() + h * dk * dv, after_all[h].data(),
                           dk * dv),
              1e-5);
}

// Token-by-token steps (a plain decode: each step folds the previous step's row) against verify
// steps of 1 + 3 rows accepting `pattern` rows: committed states and outputs of the accepted rows
// are equal bit for bit; and a sequence's bits do not change when another shares its launch.
TEST(RefKernels, GatedDeltaRuleFoldEqualsTokenByTokenBitwise) {
  const int64_t total = 16, step_rows = 4;
  const GdrCase c = gdr_case(total + step_rows, 2, 4, 16, 8, 60);
  const int64_t hv = c.hv, dv = c.dv;
  auto rows_of = [&](int64_t r0, int64_t n) {
    GdrCase s = c;
    for (Tensor* t : {&s.q, &s.k, &s.v, &s.a, &s.b}) *t = t->slice(0, r0, r0 + n);
    return s;
  };
  // Plain: one row per step.
  GdrPool plain(c, 1, step_rows);
  Tensor plain_out = Tensor::zeros({total, hv, dv}, DType::kF32);
  std::vector<std::vector<float>> plain_state(total + 1);
  for (int64_t t = 0; t < total; ++t) {
    run_gdr(rows_of(t, 1), plain, plain_out.slice(0, t, t + 1), kernels::GdrMode::kRecurrent,
            {{1, 0, t > 0 ? 1 : 0, static_cast<int32_t>(t & 1), 0}});
    const float* s = plain.state.data<float>();
    plain_state[t] = std::vector<float>(s, s + plain.state.numel());  // state after t - 1 tokens
  }
  // Verify steps with acceptance 3, 1, 4, 2, ... in slot 1 of a pool; slot 0 runs another
  // sequence in the same launches.
  GdrPool spec(c, 2, step_rows);
  const GdrCase other = gdr_case(step_rows, 2, 4, 16, 8, 99);
  int64_t committed = 0;
  int32_t n_acc = 0, parity = 0;
  const std::vector<int> pattern{3, 1, 4, 2, 4, 1, 1};
  for (size_t i = 0; i < pattern.size() && committed + step_rows <= total; ++i) {
    // Rows: the other sequence's 4 rows first, then this one's 4 (1 + 3 drafts).
    GdrCase both = gdr_case(2 * step_rows, 2, 4, 16, 8, 1);
    both.a_log = c.a_log, both.dt_bias = c.dt_bias;  // one layer's weights
    for (int p = 0; p < 5; ++p) {
      Tensor* dst = std::array<Tensor*, 5>{&both.q, &both.k, &both.v, &both.a, &both.b}[p];
      const Tensor* a =
          std::array<const Tensor*, 5>{&other.q, &other.k, &other.v, &other.a, &other.b}[p];
      const Tensor* b = std::array<const Tensor*, 5>{&c.q, &c.k, &c.v, &c.a, &c.b}[p];
      const int64_t row = dst->numel() / dst->dim(0);
      std::memcpy(dst->data<float>(), a->data<float>(), step_rows * row * 4);
      std::memcpy(dst->data<float>() + step_rows * row, b->data<float>() + committed * row,
                  step_rows * row * 4);
    }
    Tensor out = Tensor::zeros({2 * step_rows, hv, dv}, DType::kF32);
    run_gdr(both, spec, out, kernels::GdrMode::kRecurrent,
            {{4, 0, 0, 0, 0}, {4, 1, n_acc, parity, 0}});
    // The fold of the last commit: the state after `committed` tokens, bit for bit.
    const float* s = spec.state.data<float>() + spec.state.select(0, 0).numel();
    EXPECT_TRUE(same_bits(s, plain_state[committed].data(), spec.state.select(0, 1).numel()))
        << "step " << i << " committed " << committed;
    for (int r = 0; r < pattern[i]; ++r)
      EXPECT_TRUE(same_bits(out.data<float>() + (step_rows + r) * hv * dv,
                            plain_out.data<float>() + (committed + r) * hv * dv, hv * dv))
          << "step " << i << " row " << r;
    n_acc = pattern[i];
    parity ^= 1;
    committed += pattern[i];
  }
  EXPECT_GT(committed, 8);
}

TEST(RefKernels, GatedDeltaRuleChunkedEqualsRecurrent) {
  for (int64_t n : {1, 63, 64, 65, 200}) {
    const GdrCase c = gdr_case(n, 2, 4, 16, 8, 50 + n);
    // Start from a non-zero committed state to cover the initial-state path.
    GdrPool rec(c, 1, n), chk(c, 1, 1);
    const Tensor init = random_tensor({1, c.hv, c.dk, c.dv}, 99, 0.3f);
    rec.state.copy_from(init);
    chk.state.copy_from(init);
    Tensor o_rec = Tensor::zeros({n, c.hv, c.dv}, DType::kF32),
           o_chk = Tensor::zeros({n, c.hv, c.dv}, DType::kF32);
    run_gdr(c, rec, o_rec, kernels::GdrMode::kRecurrent, {{static_cast<int32_t>(n), 0, 0, 0, 0}});
    run_gdr(c, rec, o_rec.slice(0, 0, 0), kernels::GdrMode::kRecurrent,
            {{0, 0, static_cast<int32_t>(n), 1, 0}});  // commit all rows
    run_gdr(c, chk, o_chk, kernels::GdrMode::kChunked, {{static_cast<int32_t>(n), 0, 0, 0, 0}});
    const double out_diff = max_abs_diff(o_rec, o_chk),
                 state_diff = max_abs_diff(rec.state, chk.state);
    std::printf("[gdr chunked vs recurrent] n=%lld max|out diff|=%.3g max|state diff|=%.3g\n",
                static_cast<long long>(n), out_diff, state_diff);
    EXPECT_LT(out_diff, 1e-4);
    EXPECT_LT(state_diff, 1e-4);
  }
}

TEST(RefKernels, GatedDeltaRuleChunkBoundariesFollowPosition) {
  // Starting at position 40, the first chunk is 24 tokens: the result equals a recurrent run.
  const GdrCase c = gdr_case(100, 1, 1, 8, 8, 70);
  GdrPool p1(c, 1, 1), p2(c, 1, 100);
  Tensor o1 = Tensor::zeros({100, 1, 8}, DType::kF32), o2 = Tensor::zeros({100, 1, 8}, DType::kF32);
  run_gdr(c, p1, o1, kernels::GdrMode::kChunked, {{100, 0, 0, 0, 40}});
  run_gdr(c, p2, o2, kernels::GdrMode::kRecurrent, {{100, 0, 0, 0, 0}});
  EXPECT_LT(max_abs_diff(o1, o2), 1e-4);
}

TEST(RefKernels, GatedDeltaRuleChunkedRefusesPendingRows) {
  const GdrCase c = gdr_case(4, 1, 1, 8, 8, 80);
  GdrPool p(c, 1, 4);
  Tensor o = Tensor::zeros({4, 1, 8}, DType::kF32);
  EXPECT_THROW(run_gdr(c, p, o, kernels::GdrMode::kChunked, {{4, 0, 2, 0, 0}}), Error);
}

}  // namespace
}  // namespace tandem
