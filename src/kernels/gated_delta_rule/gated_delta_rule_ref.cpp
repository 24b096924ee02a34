// CPU reference gated delta rule over a batch of sequences: the fold of the last step's accepted
// rows, then the recurrent form (token by token) or the chunked form (per chunk: U = (I + A)^-1
// (beta v - beta e^G K S0) by forward substitution, then outputs and the final state from U; see
// the derivation in docs/architecture.md). Both run per value head of each sequence.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

namespace {

// Where one row's raw inputs are: the call's tensors, or a replay buffer row.
struct RowView {
  const float *q, *k, *v;  // q may be null (folded rows have no output)
  float a, b;
};

struct TokenInputs {  // one value head's normalised inputs of one token
  std::vector<float> q, k;
  const float* v;
  float g, beta;
};

void l2_normalise(float* x, int64_t n, float scale) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] = (x[i] * inv) * scale;
}

struct HeadConsts {
  float a_decay, dt_bias, q_scale;
};

TokenInputs token_inputs(const RowView& r, const HeadConsts& h, int64_t dk) {
  TokenInputs in;
  if (r.q != nullptr) {
    in.q.assign(r.q, r.q + dk);
    l2_normalise(in.q.data(), dk, h.q_scale);
  }
  in.k.assign(r.k, r.k + dk);
  l2_normalise(in.k.data(), dk, 1.f);
  in.v = r.v;
  in.g = -h.a_decay * ref::softplus(r.a + h.dt_bias);
  in.beta = ref::sigmoid(r.b);
  return in;
}

// S [dk, dv]; one token of the recurrence; writes o [dv] when o is given.
void recurrent_step(float* S, const TokenInputs& in, int64_t dk, int64_t dv, float* o) {
  // Loops run i outer, j inner (contiguous in S); each sum over i still runs in order 0..dk-1.
  const float decay = std::exp(in.g);
  for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
  std::vector<float> u(dv, 0.f);  // first S^T k, then u = beta (v - S^T k)
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) u[j] += S[i * dv + j] * in.k[i];
  for (int64_t j = 0; j < dv; ++j) u[j] = in.beta * (in.v[j] - u[j]);
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += in.k[i] * u[j];
  if (o == nullptr) return;
  for (int64_t j = 0; j < dv; ++j) o[j] = 0.f;
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) o[j] += S[i * dv + j] * in.q[i];
}

float dot(const float* x, const float* y, int64_t n) {
  float acc = 0.f;
  for (int64_t i = 0; i < n; ++i) acc += x[i] * y[i];
  return acc;
}

// One chunk of `len` tokens of the chunked form, starting from state S (updated in place); out_t
// receives token t's output.
void chunk_step(float* S, const std::vector<TokenInputs>& tok, int64_t s, int64_t len, int64_t dk,
                int64_t dv, const std::vector<float*>& out) {
  std::vector<float> G(len), u(len * dv);
  float cum = 0.f;
  for (int64_t t = 0; t < len; ++t) G[t] = (cum += tok[s + t].g);
  for (int64_t t = 0; t < len; ++t) {
    const float* kt = tok[s + t].k.data();
    const float bt = tok[s + t].beta, eg = std::exp(G[t]);
    float* ut = u.data() + t * dv;
    for (int64_t j = 0; j < dv; ++j) {
      float acc = 0.f;
      for (int64_t i = 0; i < dk; ++i) acc += S[i * dv + j] * kt[i];
      ut[j] = bt * (tok[s + t].v[j] - eg * acc);
    }
    for (int64_t r = 0; r < t; ++r) {  // forward substitution: u_t -= A_tr u_r
      const float a_tr = bt * std::exp(G[t] - G[r]) * dot(kt, tok[s + r].k.data(), dk);
      for (int64_t j = 0; j < dv; ++j) ut[j] -= a_tr * u[r * dv + j];
    }
  }
  for (int64_t t = 0; t < len; ++t) {
    const float* qt = tok[s + t].q.data();
    float* o = out[s + t];
    const float eg = std::exp(G[t]);
    for (int64_t j = 0; j < dv; ++j) {
      float acc = 0.f;
      for (int64_t i = 0; i < dk; ++i) acc += S[i * dv + j] * qt[i];
      o[j] = eg * acc;
    }
    for (int64_t r = 0; r <= t; ++r) {
      const float w = std::exp(G[t] - G[r]) * dot(qt, tok[s + r].k.data(), dk);
      for (int64_t j = 0; j < dv; ++j) o[j] += w * u[r * dv + j];
    }
  }
  const float eg_last = std::exp(G[len - 1]);
  for (int64_t i = 0; i < dk * dv; ++i) S[i] *= eg_last;
  for (int64_t r = 0; r < len; ++r) {
    const float w = std::exp(G[len - 1] - G[r]);
    const float* kr = tok[s + r].k.data();
    for (int64_t i = 0; i < dk; ++i) {
      const float wk = w * kr[i];
      for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += wk * u[r * dv + j];
    }
  }
}

struct Dims {
  int64_t hk_n, hv_n, dk, dv, kd, vd, width, replay_rows;
};

// Replay row j of (slot, half): [k | v | a | b].
const float* replay_row(const GatedDeltaRuleArgs& a, const Dims& d, int64_t slot, int64_t half,
                        int64_t j) {
  return a.replay.data<const float>() + ((slot * 2 + half) * d.replay_rows + j) * d.width;
}

void run_sequence(const GatedDeltaRuleArgs& a, const Dims& d, int64_t s, const ExecContext& ctx) {
  const int32_t* row_start = a.seqs.row_start.data<const int32_t>();
  const int64_t r0 = row_start[s], n = row_start[s + 1] - r0;
  const int64_t slot = a.slot.data<const int32_t>()[s];
  const int32_t n_acc = a.n_acc.data<const int32_t>()[s];
  const int64_t parity = a.parity.raw() ? a.parity.data<const int32_t>()[s] : 0;
  const int64_t n_slots = a.state.dim(0);
  TANDEM_CHECK(slot >= 0 && slot < n_slots, "gated_delta_rule: sequence {} slot {} outside [0, {})",
               s, slot, n_slots);
  TANDEM_CHECK(n_acc >= 0 && n_acc <= d.replay_rows,
               "gated_delta_rule: sequence {} n_acc {} outside [0, {}]", s, n_acc, d.replay_rows);
  TANDEM_CHECK(parity == 0 || parity == 1, "gated_delta_rule: sequence {} parity {} not 0 or 1", s,
               parity);
  TANDEM_CHECK(a.mode == GdrMode::kChunked || n <= d.replay_rows,
               "gated_delta_rule: sequence {} has {} rows, the replay buffer keeps {}", s, n,
               d.replay_rows);
  TANDEM_CHECK(a.mode == GdrMode::kRecurrent || n_acc == 0,
               "gated_delta_rule: a chunked (prefill) call needs n_acc 0, sequence {} has {}", s,
               n_acc);
  const int64_t head_elems = d.dk * d.dv;
  float* state = a.state.data<float>() + slot * d.hv_n * head_elems;
  const int64_t start = a.mode == GdrMode::kChunked ? a.start_position.data<const int32_t>()[s] : 0;
#pragma omp parallel for num_threads(ref::threads_for(ctx, d.hv_n*(n + n_acc) * d.dk * d.dv * 4)) \
    schedule(static)
  for (int64_t hv = 0; hv < d.hv_n; ++hv) {
    const int64_t hk = hv / (d.hv_n / d.hk_n);
    const HeadConsts hc{std::exp(ref::load_f32(a.a_log, hv)), ref::load_f32(a.dt_bias, hv),
                        1.f / std::sqrt(static_cast<float>(d.dk))};
    float* S = state + hv * head_elems;
    for (int32_t j = 0; j < n_acc; ++j) {  // the fold: the last step's accepted rows
      const float* row = replay_row(a, d, slot, 1 - parity, j);
      const RowView r{nullptr, row + hk * d.dk, row + d.kd + hv * d.dv, row[d.kd + d.vd + hv],
                      row[d.kd + d.vd + d.hv_n + hv]};
      recurrent_step(S, token_inputs(r, hc, d.dk), d.dk, d.dv, nullptr);
    }
    std::vector<TokenInputs> tok;
    std::vector<float*> out;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t r = r0 + t;
      const RowView v{a.q.data<const float>() + r * a.q.stride(0) + hk * a.q.stride(1),
                      a.k.data<const float>() + r * a.k.stride(0) + hk * a.k.stride(1),
                      a.v.data<const float>() + r * a.v.stride(0) + hv * a.v.stride(1),
                      a.a.data<const float>()[r * a.a.stride(0) + hv * a.a.stride(1)],
                      a.b.data<const float>()[r * a.b.stride(0) + hv * a.b.stride(1)]};
      tok.push_back(token_inputs(v, hc, d.dk));
      out.push_back(a.out.data<float>() + r * a.out.stride(0) + hv * a.out.stride(1));
    }
    if (a.mode == GdrMode::kRecurrent) {
      std::vector<float> cur(S, S + head_elems);  // the rows' states are not stored
      for (int64_t t = 0; t < n; ++t) recurrent_step(cur.data(), tok[t], d.dk, d.dv, out[t]);
    } else {
      int64_t t = 0;
      while (t < n) {
        const int64_t pos = start + t;
        const int64_t len = std::min<int64_t>(a.chunk_size - pos % a.chunk_size, n - t);
        chunk_step(S, tok, t, len, d.dk, d.dv, out);
        t += len;
      }
    }
  }
  if (a.mode == GdrMode::kRecurrent) {  // this step's raw rows, for the next step's fold
    for (int64_t t = 0; t < n; ++t) {
      const int64_t r = r0 + t;
      float* row = a.replay.data<float>() + ((slot * 2 + parity) * d.replay_rows + t) * d.width;
      for (int64_t h = 0; h < d.hk_n; ++h)
        std::memcpy(row + h * d.dk, a.k.data<const float>() + r * a.k.stride(0) + h * a.k.stride(1),
                    d.dk * 4);
      for (int64_t h = 0; h < d.hv_n; ++h) {
        std::memcpy(row + d.kd + h * d.dv,
                    a.v.data<const float>() + r * a.v.stride(0) + h * a.v.stride(1), d.dv * 4);
        row[d.kd + d.vd + h] = a.a.data<const float>()[r * a.a.stride(0) + h * a.a.stride(1)];
        row[d.kd + d.vd + d.hv_n + h] =
            a.b.data<const float>()[r * a.b.stride(0) + h * a.b.stride(1)];
      }
    }
  }
  if (a.norm.out.raw() != nullptr && n > 0) {
    gated_rms_norm_ref({.o = a.out.slice(0, r0, r0 + n),
                        .z = a.norm.z.slice(0, r0, r0 + n),
                        .weight = a.norm.weight,
                        .out = a.norm.out.slice(0, r0, r0 + n),
                        .eps = a.norm.eps},
                       ctx);
  }
}

}  // namespace

void gated_delta_rule_ref(const GatedDeltaRuleArgs& a, const ExecContext& ctx) {
  for (const Tensor* t : {&a.q, &a.k, &a.v, &a.a, &a.b, &a.out})
    ref::expect_f32_act(*t, "gated_delta_rule input");
  ref::expect_f32_act(a.state, "gated_delta_rule.state");
  ref::expect_f32_act(a.replay, "gated_delta_rule.replay");
  expect_seq_layout(a.seqs, "gated_delta_rule");
  expect_per_seq(a.slot, a.seqs, "gated_delta_rule", "slot");
  expect_per_seq(a.n_acc, a.seqs, "gated_delta_rule", "n_acc");
  if (a.mode == GdrMode::kRecurrent) expect_per_seq(a.parity, a.seqs, "gated_delta_rule", "parity");
  if (a.mode == GdrMode::kChunked)
    expect_per_seq(a.start_position, a.seqs, "gated_delta_rule", "start_position");
  Dims d{};
  d.hk_n = a.q.dim(1), d.dk = a.q.dim(2), d.hv_n = a.v.dim(1), d.dv = a.v.dim(2);
  d.kd = d.hk_n * d.dk, d.vd = d.hv_n * d.dv;
  d.width = gdr_replay_width(d.hk_n, d.dk, d.hv_n, d.dv);
  TANDEM_CHECK(d.hv_n % d.hk_n == 0,
               "gated_delta_rule: {} value heads not a multiple of {} key heads", d.hv_n, d.hk_n);
  TANDEM_CHECK(a.state.ndim() == 4 && a.state.dim(1) == d.hv_n && a.state.dim(2) == d.dk &&
                   a.state.dim(3) == d.dv && a.state.is_contiguous(),
               "gated_delta_rule: state {} does not match [slots, {}, {}, {}]", a.state.describe(),
               d.hv_n, d.dk, d.dv);
  TANDEM_CHECK(a.replay.ndim() == 4 && a.replay.dim(0) == a.state.dim(0) && a.replay.dim(1) == 2 &&
                   a.replay.dim(3) == d.width && a.replay.is_contiguous(),
               "gated_delta_rule: replay {} does not match [{}, 2, rows, {}]", a.replay.describe(),
               a.state.dim(0), d.width);
  d.replay_rows = a.replay.dim(2);
  for (int64_t s = 0; s < a.seqs.n_seqs; ++s) run_sequence(a, d, s, ctx);
}

}  // namespace tandem::kernels
