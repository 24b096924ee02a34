// CPU reference gated delta rule: the recurrent form (token by token) and the chunked form
// (per chunk: U = (I + A)^-1 (beta v - beta e^G K S0) by forward substitution, then outputs and
// the final state from U; see the derivation in docs/architecture.md). Both run per value head.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

namespace {

struct HeadInputs {                     // one value head's normalised inputs for all tokens
  std::vector<float> q, k, v, g, beta;  // q,k: [n, dk]; v: [n, dv]; g, beta: [n]
};

void l2_normalise(float* x, int64_t n, float scale) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] = (x[i] * inv) * scale;
}

HeadInputs gather_head(const GatedDeltaRuleArgs& a, int64_t hv, int64_t hk, int64_t dk,
                       int64_t dv) {
  const int64_t n = a.q.dim(0);
  HeadInputs in;
  in.q.resize(n * dk);
  in.k.resize(n * dk);
  in.v.resize(n * dv);
  in.g.resize(n);
  in.beta.resize(n);
  const float a_decay = std::exp(ref::load_f32(a.a_log, hv));
  const float dt_bias = ref::load_f32(a.dt_bias, hv);
  const float q_scale = 1.f / std::sqrt(static_cast<float>(dk));
  for (int64_t t = 0; t < n; ++t) {
    const float* q = a.q.data<const float>() + t * a.q.stride(0) + hk * a.q.stride(1);
    const float* k = a.k.data<const float>() + t * a.k.stride(0) + hk * a.k.stride(1);
    const float* v = a.v.data<const float>() + t * a.v.stride(0) + hv * a.v.stride(1);
    std::copy(q, q + dk, in.q.begin() + t * dk);
    std::copy(k, k + dk, in.k.begin() + t * dk);
    std::copy(v, v + dv, in.v.begin() + t * dv);
    l2_normalise(in.q.data() + t * dk, dk, q_scale);
    l2_normalise(in.k.data() + t * dk, dk, 1.f);
    const float a_raw = a.a.data<const float>()[t * a.a.stride(0) + hv * a.a.stride(1)];
    const float b_raw = a.b.data<const float>()[t * a.b.stride(0) + hv * a.b.stride(1)];
    in.g[t] = -a_decay * ref::softplus(a_raw + dt_bias);
    in.beta[t] = ref::sigmoid(b_raw);
  }
  return in;
}

// S [dk, dv]; one token of the recurrence; writes o [dv].
void recurrent_step(float* S, const float* q, const float* k, const float* v, float g, float beta,
                    int64_t dk, int64_t dv, float* o) {
  // Loops run i outer, j inner (contiguous in S); each sum over i still runs in order 0..dk-1.
  const float decay = std::exp(g);
  for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
  std::vector<float> u(dv, 0.f);  // first S^T k, then u = beta (v - S^T k)
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) u[j] += S[i * dv + j] * k[i];
  for (int64_t j = 0; j < dv; ++j) u[j] = beta * (v[j] - u[j]);
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += k[i] * u[j];
  for (int64_t j = 0; j < dv; ++j) o[j] = 0.f;
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) o[j] += S[i * dv + j] * q[i];
}

float dot(const float* x, const float* y, int64_t n) {
  float acc = 0.f;
  for (int64_t i = 0; i < n; ++i) acc += x[i] * y[i];
  return acc;
}

// One chunk [s, s + len) of the chunked form, starting from state S (updated in place).
void chunk_step(float* S, const HeadInputs& in, int64_t s, int64_t len, int64_t dk, int64_t dv,
                float* out, int64_t out_stride) {
  std::vector<float> G(len), u(len * dv), s0k(dv);
  float cum = 0.f;
  for (int64_t t = 0; t < len; ++t) G[t] = (cum += in.g[s + t]);
  for (int64_t t = 0; t < len; ++t) {
    const float* kt = in.k.data() + (s + t) * dk;
    const float bt = in.beta[s + t], eg = std::exp(G[t]);
    float* ut = u.data() + t * dv;
    for (int64_t j = 0; j < dv; ++j) {
      float acc = 0.f;
      for (int64_t i = 0; i < dk; ++i) acc += S[i * dv + j] * kt[i];
      ut[j] = bt * (in.v[(s + t) * dv + j] - eg * acc);
    }
    for (int64_t r = 0; r < t; ++r) {  // forward substitution: u_t -= A_tr u_r
      const float a_tr = bt * std::exp(G[t] - G[r]) * dot(kt, in.k.data() + (s + r) * dk, dk);
      for (int64_t j = 0; j < dv; ++j) ut[j] -= a_tr * u[r * dv + j];
    }
  }
  for (int64_t t = 0; t < len; ++t) {
    const float* qt = in.q.data() + (s + t) * dk;
    float* o = out + (s + t) * out_stride;
    const float eg = std::exp(G[t]);
    for (int64_t j = 0; j < dv; ++j) {
      float acc = 0.f;
      for (int64_t i = 0; i < dk; ++i) acc += S[i * dv + j] * qt[i];
      o[j] = eg * acc;
    }
    for (int64_t r = 0; r <= t; ++r) {
      const float w = std::exp(G[t] - G[r]) * dot(qt, in.k.data() + (s + r) * dk, dk);
      for (int64_t j = 0; j < dv; ++j) o[j] += w * u[r * dv + j];
    }
  }
  const float eg_last = std::exp(G[len - 1]);
  for (int64_t i = 0; i < dk * dv; ++i) S[i] *= eg_last;
  for (int64_t r = 0; r < len; ++r) {
    const float w = std::exp(G[len - 1] - G[r]);
    const float* kr = in.k.data() + (s + r) * dk;
    for (int64_t i = 0; i < dk; ++i) {
      const float wk = w * kr[i];
      for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += wk * u[r * dv + j];
    }
  }
}

}  // namespace

void gated_delta_rule_ref(const GatedDeltaRuleArgs& a, const ExecContext& ctx) {
  for (const Tensor* t : {&a.q, &a.k, &a.v, &a.a, &a.b, &a.out})
    ref::expect_f32_act(*t, "gated_delta_rule input");
  ref::expect_f32_act(a.state, "gated_delta_rule.state");
  const int64_t n = a.q.dim(0), hk_n = a.q.dim(1), dk = a.q.dim(2);
  const int64_t hv_n = a.v.dim(1), dv = a.v.dim(2), n_cols = a.state.dim(0);
  TANDEM_CHECK(hv_n % hk_n == 0, "gated_delta_rule: {} value heads not a multiple of {} key heads",
               hv_n, hk_n);
  TANDEM_CHECK(a.state.dim(1) == hv_n && a.state.dim(2) == dk && a.state.dim(3) == dv &&
                   a.state.is_contiguous(),
               "gated_delta_rule: state {} does not match [cols, {}, {}, {}]", a.state.describe(),
               hv_n, dk, dv);
  const int32_t col0 = a.n_acc.data<const int32_t>()[0] - 1;
  TANDEM_CHECK(col0 >= 0 && col0 < n_cols, "gated_delta_rule: n_acc {} outside [1, {}]", col0 + 1,
               n_cols);
  TANDEM_CHECK(a.mode == GdrMode::kChunked || n <= n_cols,
               "gated_delta_rule: {} tokens need {} state columns, have {}", n, n, n_cols);
  const int64_t head_elems = dk * dv, col_elems = hv_n * head_elems;
  float* state = a.state.data<float>();
#pragma omp parallel for num_threads(ref::threads_for(ctx, hv_n* n* dk* dv * 4)) schedule(static)
  for (int64_t hv = 0; hv < hv_n; ++hv) {
    const HeadInputs in = gather_head(a, hv, hv / (hv_n / hk_n), dk, dv);
    std::vector<float> S(state + col0 * col_elems + hv * head_elems,
                         state + col0 * col_elems + (hv + 1) * head_elems);
    float* out = a.out.data<float>() + hv * a.out.stride(1);
    const int64_t out_stride = a.out.stride(0);
    if (a.mode == GdrMode::kRecurrent) {
      for (int64_t t = 0; t < n; ++t) {
        recurrent_step(S.data(), in.q.data() + t * dk, in.k.data() + t * dk, in.v.data() + t * dv,
                       in.g[t], in.beta[t], dk, dv, out + t * out_stride);
        std::memcpy(state + t * col_elems + hv * head_elems, S.data(), head_elems * 4);
      }
    } else {
      int64_t s = 0;
      while (s < n) {
        const int64_t pos = a.start_position + s;
        const int64_t len = std::min<int64_t>(a.chunk_size - pos % a.chunk_size, n - s);
        chunk_step(S.data(), in, s, len, dk, dv, out, out_stride);
        s += len;
      }
      std::memcpy(state + hv * head_elems, S.data(), head_elems * 4);
    }
  }
  if (a.norm.out.raw() != nullptr) {
    gated_rms_norm_ref(
        {.o = a.out, .z = a.norm.z, .weight = a.norm.weight, .out = a.norm.out, .eps = a.norm.eps},
        ctx);
  }
}

}  // namespace tandem::kernels
