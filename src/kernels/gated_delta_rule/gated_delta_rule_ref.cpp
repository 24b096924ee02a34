// CPU reference gated delta rule over a batch of sequences: the fold of the last step's accepted
// rows, then the recurrent form (token by token) or the chunked form (per chunk: U = (I + A)^-1
// (beta v - beta e^G K S0) by forward substitution, then outputs and the final state from U; see
// the derivation in docs/architecture.md). Both run per value head of each sequence, one task per
// (sequence, value head), so threads split heads, never a sum; every sum is an FMA chain in a
// fixed order. The recurrent form is written per state column (pass_columns, the specification)
// and run over whole rows 8 columns per vector (pass_vector, the same bits); the chunked form's
// products are ref::fma_rank_update. tests/kernels/vector_paths_test.cpp checks the recurrent
// form against its formula bit for bit; state_kernels_test.cpp the fold and the chunked form.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "kernels/ref_common.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TANDEM_GDR_AVX2 1
#endif

namespace tandem::kernels {

namespace {

// One value head's inputs of one token, normalised (the call's scratch owns q and k).
struct Token {
  const float* q;        // q^ = q / |q| d_k^-1/2 [d_k]; null for folded rows (no output)
  const float* k;        // k^ = k / |k| [d_k]
  const float* v;        // [d_v]
  float g, decay, beta;  // g, e^g, beta
};

void l2_normalise(const float* x, float* y, int64_t n, float scale) {
  const float ss = ref::dot_f32(x, x, n);  // = ref::dot(x, x, n)
  const float inv = 1.f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * inv) * scale;
}

// The recurrent form, per token (the specification, written for one column j of S [d_k, d_v];
// the columns evolve independently), from the state S before the token:
//   D[i, j] = e^g S[i, j]                                   (the decayed state, rounded)
//   w_j = sum_i D[i, j] k_i,  z_j = sum_i D[i, j] q_i       (FMA chains over i in order)
//   u_j = beta (v_j - w_j)
//   o_j = z_j + (k . q) u_j                                 (= S'^T q; one FMA)
//   S'[i, j] = D[i, j] + k_i u_j                            (one FMA)
// i.e. S' = e^g (I - beta k k^T) S + beta k v^T. So a token needs one read of the state for w and
// z, and its update can share a pass with the next token's w and z: a pass reads S, optionally
// writes S' = update(S, a), and accumulates the next token b's w (and z) from the state it wrote
// (recomputing b's D there; b's own update pass computes the same D again). A plain decode step
// (fold 1 row, then 1 row) is then two passes and one write of the state.
struct Pass {
  const float* src;  // state before the pass, rows lds apart
  int64_t lds;
  float* dst;  // state after token a (may be src), rows ldd apart; null: no update
  int64_t ldd;
  const float* ka;  // update token: k^ [d_k], u [d_v], e^g
  const float* ua;
  float decay;
  float decay_b;  // next token: e^g, k^ [d_k] and q^ (null: no z); w and z accumulated [d_v]
  const float* kb;
  const float* qb;
  float* wb;
  float* zb;
};

// The pass on columns [j0, j1), one column at a time (the specification's order).
void pass_columns(const Pass& p, int64_t dk, int64_t j0, int64_t j1) {
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t i = 0; i < dk; ++i) {
      float s = p.src[i * p.lds + j];
      if (p.dst != nullptr) {
        s = std::fma(p.ka[i], p.ua[j], p.decay * s);
        p.dst[i * p.ldd + j] = s;
      }
      const float sb = p.decay_b * s;  // token b's D[i, j]
      if (p.kb != nullptr) p.wb[j] = std::fma(sb, p.kb[i], p.wb[j]);
      if (p.qb != nullptr) p.zb[j] = std::fma(sb, p.qb[i], p.zb[j]);
    }
}

#ifdef TANDEM_GDR_AVX2
// The pass over whole rows, 8 columns per vector: blocks of 8 rows (contiguous memory) x 32
// columns, whose w and z sums (and u) sit in registers while the 8 rows go by; every element
// still takes its FMAs in the order of pass_columns, so the bits are the same. (Rows d_v apart
// walked 32 columns at a time would fall into few L1 sets; whole rows stream.)
template <bool kUpdate, bool kW, bool kZ>
void pass_vector(const Pass& p, int64_t dk, int64_t n_cols) {
  // Locals: a vector store may alias anything, so fields read through p would be reloaded.
  const float *src = p.src, *ka = p.ka, *ua = p.ua, *kb = p.kb, *qb = p.qb;
  float *dst = p.dst, *wb = p.wb, *zb = p.zb;
  const int64_t lds = p.lds, ldd = p.ldd;
  const __m256 decay = _mm256_set1_ps(p.decay), decay_b = _mm256_set1_ps(p.decay_b);
  for (int64_t i0 = 0; i0 < dk; i0 += 8) {
    const int64_t i1 = std::min(dk, i0 + 8);
    for (int64_t j = 0; j < n_cols; j += 32) {
      __m256 u[4], w[4], z[4];
      for (int v = 0; v < 4; ++v) {
        if constexpr (kUpdate) u[v] = _mm256_loadu_ps(ua + j + 8 * v);
        if constexpr (kW) w[v] = _mm256_loadu_ps(wb + j + 8 * v);
        if constexpr (kZ) z[v] = _mm256_loadu_ps(zb + j + 8 * v);
      }
      for (int64_t i = i0; i < i1; ++i) {
        const float* in = src + i * lds + j;
        float* out = kUpdate ? dst + i * ldd + j : nullptr;
        const __m256 kai = kUpdate ? _mm256_broadcast_ss(ka + i) : decay;
        const __m256 kbi = kW ? _mm256_broadcast_ss(kb + i) : decay;
        const __m256 qbi = kZ ? _mm256_broadcast_ss(qb + i) : decay;
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          __m256 s = _mm256_loadu_ps(in + 8 * v);
          if constexpr (kUpdate) {
            s = _mm256_fmadd_ps(kai, u[v], _mm256_mul_ps(decay, s));
            _mm256_storeu_ps(out + 8 * v, s);
          }
          const __m256 sb = _mm256_mul_ps(decay_b, s);
          if constexpr (kW) w[v] = _mm256_fmadd_ps(sb, kbi, w[v]);
          if constexpr (kZ) z[v] = _mm256_fmadd_ps(sb, qbi, z[v]);
        }
      }
      for (int v = 0; v < 4; ++v) {
        if constexpr (kW) _mm256_storeu_ps(wb + j + 8 * v, w[v]);
        if constexpr (kZ) _mm256_storeu_ps(zb + j + 8 * v, z[v]);
      }
    }
  }
}
#endif

void state_pass(const Pass& p, int64_t dk, int64_t dv) {
  int64_t j = 0;
#ifdef TANDEM_GDR_AVX2
  j = dv / 32 * 32;
  if (j > 0) {
    const bool up = p.dst != nullptr, w = p.kb != nullptr, z = p.qb != nullptr;
    if (up && w && z) pass_vector<true, true, true>(p, dk, j);
    if (up && w && !z) pass_vector<true, true, false>(p, dk, j);
    if (up && !w) pass_vector<true, false, false>(p, dk, j);
    if (!up && w && z) pass_vector<false, true, true>(p, dk, j);
    if (!up && w && !z) pass_vector<false, true, false>(p, dk, j);
  }
#endif
  pass_columns(p, dk, j, dv);
}

// The chunked form's decay factors e^x (x = G_t - G_r or G_t, <= 0), where a factor below e^-60
// is taken as 0: its terms are under 1e-26 of the r = t term summed with them (factor 1), far below
// fp32 resolution, and products of such factors would be subnormal numbers, which x86 computes a
// hundred times slower (a prefill of strongly decaying heads, g ~ -18 per token, ran 5x slower).
inline float decay_factor(float x) { return x < -60.f ? 0.f : ref::exp(x); }

// E[r] = decay_factor(G_t - G[r]) for r < n (8 at a time where AVX2 is built; the same bits).
void decay_row(float gt, const float* G, int64_t n, float* E) {
  int64_t r = 0;
#ifdef TANDEM_GDR_AVX2
  for (; r + 8 <= n; r += 8) {
    const __m256 x = _mm256_sub_ps(_mm256_set1_ps(gt), _mm256_loadu_ps(G + r));
    const __m256 cut = _mm256_cmp_ps(x, _mm256_set1_ps(-60.f), _CMP_LT_OQ);
    _mm256_storeu_ps(E + r, _mm256_andnot_ps(cut, ref::exp8(x)));
  }
#endif
  for (; r < n; ++r) E[r] = decay_factor(gt - G[r]);
}

// Scratch of one chunked task, for chunks of up to L tokens: W, O, U [L, dv]; E, KK, QK [L, L];
// kT [dk, L], Kw [L, dk]; G, coef [L]. Each array starts on a 64-byte line.
struct ChunkScratch {
  ref::ScratchBuffer buf;
  float *G, *E, *W, *O, *U, *KK, *QK, *kT, *Kw, *coef;
  void size_for(int64_t L, int64_t dk, int64_t dv) {
    auto lines = [](int64_t n) { return (n + 15) / 16 * 16; };
    const int64_t sizes[10] = {L, L * L, L * dv, L * dv, L * dv, L * L, L * L, dk * L, L * dk, L};
    float** ptrs[10] = {&G, &E, &W, &O, &U, &KK, &QK, &kT, &Kw, &coef};
    int64_t total = 0;
    for (int64_t n : sizes) total += lines(n);
    float* p = buf.get(total);
    for (int i = 0; i < 10; ++i) {
      *ptrs[i] = p;
      p += lines(sizes[i]);
    }
  }
};

// One chunk of len tokens tok[0 .. len-1] of the chunked form from state S [dk, dv] (updated in
// place); out[t] receives token t's output [dv]. The normalised q and k of token t are rows of
// stride tok_stride from tok[0].q / tok[0].k (one sequence's rows of one key head).
void chunk_step(float* S, const Token* tok, int64_t tok_stride, int64_t len, int64_t dk, int64_t dv,
                float* const* out, ChunkScratch& w) {
  const int64_t L = len;
  float cum = 0.f;  // G_t = g_0 + .. + g_t
  for (int64_t t = 0; t < L; ++t) w.G[t] = (cum += tok[t].g);
  for (int64_t t = 0; t < L; ++t) decay_row(w.G[t], w.G, t + 1, w.E + t * L);
  // kT = K^T [dk, L], then the Gram matrices KK = K K^T and QK = Q K^T [L, L].
  for (int64_t t = 0; t < L; ++t)
    for (int64_t i = 0; i < dk; ++i) w.kT[i * L + t] = tok[t].k[i];
  std::fill(w.KK, w.KK + L * L, 0.f);
  std::fill(w.QK, w.QK + L * L, 0.f);
  ref::fma_rank_update(w.KK, L, tok[0].k, tok_stride, 1, w.kT, L, L, dk, L);
  ref::fma_rank_update(w.QK, L, tok[0].q, tok_stride, 1, w.kT, L, L, dk, L);
  // W = K S0 and O = Q S0 [L, dv].
  std::fill(w.W, w.W + L * dv, 0.f);
  std::fill(w.O, w.O + L * dv, 0.f);
  ref::fma_rank_update(w.W, dv, tok[0].k, tok_stride, 1, S, dv, L, dk, dv);
  ref::fma_rank_update(w.O, dv, tok[0].q, tok_stride, 1, S, dv, L, dk, dv);
  // Forward substitution: u_t = beta_t (v_t - e^{G_t} W_t) - sum_{r<t} a_tr u_r, with
  // a_tr = beta_t e^{G_t - G_r} (k_t . k_r).
  for (int64_t t = 0; t < L; ++t) {
    float* ut = w.U + t * dv;
    const float bt = tok[t].beta, egt = decay_factor(w.G[t]);
    for (int64_t j = 0; j < dv; ++j) ut[j] = bt * (tok[t].v[j] - egt * w.W[t * dv + j]);
    for (int64_t r = 0; r < t; ++r) w.coef[r] = -(bt * w.E[t * L + r] * w.KK[t * L + r]);
    ref::fma_rank_update(ut, dv, w.coef, 0, 1, w.U, dv, 1, t, dv);
  }
  // o_t = e^{G_t} O_t + sum_{r<=t} e^{G_t - G_r} (q_t . k_r) u_r.
  for (int64_t t = 0; t < L; ++t) {
    float* o = out[t];
    const float egt = decay_factor(w.G[t]);
    for (int64_t j = 0; j < dv; ++j) o[j] = egt * w.O[t * dv + j];
    for (int64_t r = 0; r <= t; ++r) w.coef[r] = w.E[t * L + r] * w.QK[t * L + r];
    ref::fma_rank_update(o, dv, w.coef, 0, 1, w.U, dv, 1, t + 1, dv);
  }
  // S_L = e^{G_L} S0 + sum_r (e^{G_L - G_r} k_r) u_r^T.
  const float eg_last = decay_factor(w.G[L - 1]);
  for (int64_t i = 0; i < dk * dv; ++i) S[i] *= eg_last;
  for (int64_t r = 0; r < L; ++r) {
    const float wr = w.E[(L - 1) * L + r];
    for (int64_t i = 0; i < dk; ++i) w.Kw[r * dk + i] = wr * tok[r].k[i];
  }
  ref::fma_rank_update(S, dv, w.Kw, 1, dk, w.U, dv, dk, L, dv);
}

struct Dims {
  int64_t hk_n, hv_n, dk, dv, kd, vd, width, replay_rows;
};

// Replay row j of (slot, half): [k | v | a | b].
const float* replay_row(const GatedDeltaRuleArgs& a, const Dims& d, int64_t slot, int64_t half,
                        int64_t j) {
  return a.replay.data<const float>() + ((slot * 2 + half) * d.replay_rows + j) * d.width;
}

// One sequence's view of the call.
struct Seq {
  int64_t r0, n, slot, n_acc, parity, start;
  int64_t tok0;  // index of its first token (fold rows first, then its rows) in the call's list
};

Seq check_sequence(const GatedDeltaRuleArgs& a, const Dims& d, int64_t s) {
  const int32_t* row_start = a.seqs.row_start.data<const int32_t>();
  Seq q{};
  q.r0 = row_start[s], q.n = row_start[s + 1] - q.r0;
  q.slot = a.slot.data<const int32_t>()[s];
  q.n_acc = a.n_acc.data<const int32_t>()[s];
  q.parity = a.parity.raw() ? a.parity.data<const int32_t>()[s] : 0;
  q.start = a.mode == GdrMode::kChunked ? a.start_position.data<const int32_t>()[s] : 0;
  const int64_t n_slots = a.state.dim(0);
  TANDEM_CHECK(q.slot >= 0 && q.slot < n_slots,
               "gated_delta_rule: sequence {} slot {} outside [0, {})", s, q.slot, n_slots);
  TANDEM_CHECK(q.n_acc >= 0 && q.n_acc <= d.replay_rows,
               "gated_delta_rule: sequence {} n_acc {} outside [0, {}]", s, q.n_acc, d.replay_rows);
  TANDEM_CHECK(q.parity == 0 || q.parity == 1, "gated_delta_rule: sequence {} parity {} not 0 or 1",
               s, q.parity);
  TANDEM_CHECK(a.mode == GdrMode::kChunked || q.n <= d.replay_rows,
               "gated_delta_rule: sequence {} has {} rows, the replay buffer keeps {}", s, q.n,
               d.replay_rows);
  TANDEM_CHECK(a.mode == GdrMode::kRecurrent || q.n_acc == 0,
               "gated_delta_rule: a chunked (prefill) call needs n_acc 0, sequence {} has {}", s,
               q.n_acc);
  return q;
}

// The call's tokens, per (token, value head): the normalised q^ / k^ of every (token, key head)
// live in qk [token][key head][q^ | k^]; folded rows have no q^.
struct Tokens {
  std::vector<float> qk;
  std::vector<Token> tok;               // [token][value head]
  std::vector<int32_t> seq_of;          // [token]: its sequence
  std::vector<float> a_decay, dt_bias;  // [value head]: e^A_log, dt_bias
  float q_scale;
};

// The call's token list (sizes and per-head constants); fill_token fills token ti.
void size_tokens(const GatedDeltaRuleArgs& a, const Dims& d, const std::vector<Seq>& seqs,
                 int64_t n_tok, Tokens& p) {
  p.qk.resize(static_cast<size_t>(n_tok * d.hk_n * 2 * d.dk));
  p.tok.resize(static_cast<size_t>(n_tok * d.hv_n));
  p.seq_of.resize(static_cast<size_t>(n_tok));
  for (size_t s = 0; s < seqs.size(); ++s)
    std::fill_n(p.seq_of.begin() + seqs[s].tok0, seqs[s].n_acc + seqs[s].n,
                static_cast<int32_t>(s));
  p.a_decay.resize(d.hv_n), p.dt_bias.resize(d.hv_n);
  for (int64_t h = 0; h < d.hv_n; ++h) {
    p.a_decay[h] = std::exp(ref::load_f32(a.a_log, h));
    p.dt_bias[h] = ref::load_f32(a.dt_bias, h);
  }
  p.q_scale = 1.f / std::sqrt(static_cast<float>(d.dk));
}

// Token ti: a fold row (the last step's accepted rows, from the replay buffer) or a call's row.
void fill_token(const GatedDeltaRuleArgs& a, const Dims& d, const std::vector<Seq>& seqs,
                int64_t ti, Tokens& p) {
  const Seq& q = seqs[p.seq_of[ti]];
  const int64_t j = ti - q.tok0;
  const float *qr = nullptr, *kr, *vr;
  int64_t q_hs = 0, k_hs, v_hs;
  float raw_a[64], raw_b[64];  // per value head
  TANDEM_CHECK(d.hv_n <= 64, "gated_delta_rule: {} value heads, the reference supports 64", d.hv_n);
  if (j < q.n_acc) {
    const float* row = replay_row(a, d, q.slot, 1 - q.parity, j);  // [k | v | a | b]
    kr = row, k_hs = d.dk, vr = row + d.kd, v_hs = d.dv;
    for (int64_t h = 0; h < d.hv_n; ++h)
      raw_a[h] = row[d.kd + d.vd + h], raw_b[h] = row[d.kd + d.vd + d.hv_n + h];
  } else {
    const int64_t r = q.r0 + j - q.n_acc;
    qr = a.q.data<const float>() + r * a.q.stride(0), q_hs = a.q.stride(1);
    kr = a.k.data<const float>() + r * a.k.stride(0), k_hs = a.k.stride(1);
    vr = a.v.data<const float>() + r * a.v.stride(0), v_hs = a.v.stride(1);
    for (int64_t h = 0; h < d.hv_n; ++h) {
      raw_a[h] = a.a.data<const float>()[r * a.a.stride(0) + h * a.a.stride(1)];
      raw_b[h] = a.b.data<const float>()[r * a.b.stride(0) + h * a.b.stride(1)];
    }
  }
  for (int64_t hk = 0; hk < d.hk_n; ++hk) {
    float* dst = p.qk.data() + (ti * d.hk_n + hk) * 2 * d.dk;
    if (qr != nullptr) l2_normalise(qr + hk * q_hs, dst, d.dk, p.q_scale);
    l2_normalise(kr + hk * k_hs, dst + d.dk, d.dk, 1.f);
  }
  for (int64_t hv = 0; hv < d.hv_n; ++hv) {
    const float* qk = p.qk.data() + (ti * d.hk_n + hv / (d.hv_n / d.hk_n)) * 2 * d.dk;
    Token& t = p.tok[ti * d.hv_n + hv];
    t.q = qr != nullptr ? qk : nullptr;
    t.k = qk + d.dk;
    t.v = vr + hv * v_hs;
    t.g = -p.a_decay[hv] * ref::softplus(raw_a[hv] + p.dt_bias[hv]);
    t.decay = ref::exp(t.g);
    t.beta = ref::sigmoid(raw_b[hv]);
  }
}

// Recurrent task: sequence q, value head hv; tokens t = 0 .. m-1 are its fold rows (t < n_acc),
// then the call's rows. The state before token t lives in the committed state while t <= n_acc
// (the fold updates it in place) and in a per-thread copy after that (the rows' states are not
// stored). Pass t + 1 applies token t and gathers w, z for token t + 1; the last row needs no
// update.
void recurrent_task(const GatedDeltaRuleArgs& a, const Dims& d, const Seq& q, const Tokens& p,
                    int64_t hv, ref::ScratchBuffer& scratch) {
  const int64_t m = q.n_acc + q.n, dk = d.dk, dv = d.dv;
  if (m == 0) return;
  float* S = a.state.data<float>() + (q.slot * d.hv_n + hv) * dk * dv;
  const int64_t vec = (dv + 15) / 16 * 16;  // w, z, u: each on whole 64-byte lines
  float* buf = scratch.get(3 * vec + (q.n > 1 ? dk * dv : 0));
  float *w = buf, *z = buf + vec, *u = buf + 2 * vec, *rows_state = buf + 3 * vec;
  auto token = [&](int64_t t) -> const Token& { return p.tok[(q.tok0 + t) * d.hv_n + hv]; };
  auto gather = [&](const Pass& pass_base, int64_t t) {  // pass_base plus token t's w (and z)
    Pass ps = pass_base;
    const Token& tk = token(t);
    std::fill(w, w + dv, 0.f);
    ps.decay_b = tk.decay, ps.kb = tk.k, ps.wb = w;
    if (t >= q.n_acc) {
      std::fill(z, z + dv, 0.f);
      ps.qb = tk.q, ps.zb = z;
    }
    state_pass(ps, dk, dv);
  };
  gather({.src = S, .lds = dv}, 0);
  for (int64_t t = 0; t < m; ++t) {
    const Token& tk = token(t);
    for (int64_t j = 0; j < dv; ++j) u[j] = tk.beta * (tk.v[j] - w[j]);
    if (t >= q.n_acc) {
      const float kq = ref::dot_f32(tk.k, tk.q, dk);
      float* o =
          a.out.data<float>() + (q.r0 + t - q.n_acc) * a.out.stride(0) + hv * a.out.stride(1);
      for (int64_t j = 0; j < dv; ++j) o[j] = std::fma(kq, u[j], z[j]);
      if (t == m - 1) break;  // the last row's state is not needed
    }
    Pass up{.src = t <= q.n_acc ? S : rows_state,
            .lds = dv,
            .dst = t < q.n_acc ? S : rows_state,
            .ldd = dv,
            .ka = tk.k,
            .ua = u,
            .decay = tk.decay};
    if (t + 1 < m) {
      gather(up, t + 1);
    } else {
      state_pass(up, dk, dv);  // the last fold row: commit
    }
  }
}

// Chunked task: sequence q, value head hv; chunk boundaries at multiples of chunk_size counted
// from position 0.
void chunked_task(const GatedDeltaRuleArgs& a, const Dims& d, const Seq& q, const Tokens& p,
                  int64_t hv, ChunkScratch& w) {
  float* S = a.state.data<float>() + (q.slot * d.hv_n + hv) * d.dk * d.dv;
  w.size_for(a.chunk_size, d.dk, d.dv);
  std::vector<float*> out(static_cast<size_t>(std::max<int64_t>(q.n, 1)));
  for (int64_t t = 0; t < q.n; ++t)
    out[t] = a.out.data<float>() + (q.r0 + t) * a.out.stride(0) + hv * a.out.stride(1);
  const int64_t tok_stride = d.hk_n * 2 * d.dk;  // the next token's q^ / k^ of the same key head
  for (int64_t t = 0; t < q.n;) {
    const int64_t pos = q.start + t;
    const int64_t len = std::min<int64_t>(a.chunk_size - pos % a.chunk_size, q.n - t);
    std::vector<Token> tok(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) tok[i] = p.tok[(q.tok0 + t + i) * d.hv_n + hv];
    chunk_step(S, tok.data(), tok_stride, len, d.dk, d.dv, out.data() + t, w);
    t += len;
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
  TANDEM_CHECK(a.mode == GdrMode::kRecurrent || a.chunk_size > 0,
               "gated_delta_rule: chunk_size {} must be positive", a.chunk_size);
  d.replay_rows = a.replay.dim(2);
  thread_local std::vector<Seq> calling_thread_seqs;  // reused call to call, shared by the team
  std::vector<Seq>& seqs = calling_thread_seqs;
  seqs.clear();
  int64_t n_tok = 0, work = 0;
  for (int64_t s = 0; s < a.seqs.n_seqs; ++s) {
    seqs.push_back(check_sequence(a, d, s));
    seqs.back().tok0 = n_tok;
    n_tok += seqs.back().n_acc + seqs.back().n;
  }
  work = n_tok * d.hv_n * d.dk * d.dv * 4;
  thread_local Tokens calling_thread_tokens;  // reused call to call: no allocation
  Tokens& p = calling_thread_tokens;          // a reference, so the team shares this thread's copy
  size_tokens(a, d, seqs, n_tok, p);
  // Tasks: (sequence, value head). Each task writes its own state and outputs only.
  const int64_t n_tasks = static_cast<int64_t>(seqs.size()) * d.hv_n;
#pragma omp parallel num_threads(ref::threads_for(ctx, work))
  {
    thread_local ref::ScratchBuffer scratch;  // grown once per thread, then reused
    thread_local ChunkScratch chunk;
#pragma omp for schedule(static)
    for (int64_t ti = 0; ti < n_tok; ++ti) fill_token(a, d, seqs, ti, p);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const Seq& q = seqs[task / d.hv_n];
      const int64_t hv = task % d.hv_n;
      if (a.mode == GdrMode::kRecurrent) {
        recurrent_task(a, d, q, p, hv, scratch);
      } else if (q.n > 0) {
        chunked_task(a, d, q, p, hv, chunk);
      }
    }
  }
  if (a.mode == GdrMode::kRecurrent) {  // this step's raw rows, for the next step's fold
    for (const Seq& q : seqs) {
      for (int64_t t = 0; t < q.n; ++t) {
        const int64_t r = q.r0 + t;
        float* row =
            a.replay.data<float>() + ((q.slot * 2 + q.parity) * d.replay_rows + t) * d.width;
        for (int64_t h = 0; h < d.hk_n; ++h)
          std::memcpy(row + h * d.dk,
                      a.k.data<const float>() + r * a.k.stride(0) + h * a.k.stride(1), d.dk * 4);
        for (int64_t h = 0; h < d.hv_n; ++h) {
          std::memcpy(row + d.kd + h * d.dv,
                      a.v.data<const float>() + r * a.v.stride(0) + h * a.v.stride(1), d.dv * 4);
          row[d.kd + d.vd + h] = a.a.data<const float>()[r * a.a.stride(0) + h * a.a.stride(1)];
          row[d.kd + d.vd + d.hv_n + h] =
              a.b.data<const float>()[r * a.b.stride(0) + h * a.b.stride(1)];
        }
      }
    }
  }
  // The output norm over the call's rows (its sequences' rows are one contiguous range).
  const int32_t* row_start = a.seqs.row_start.data<const int32_t>();
  const int64_t r_begin = a.seqs.n_seqs > 0 ? row_start[0] : 0;
  const int64_t r_end = a.seqs.n_seqs > 0 ? row_start[a.seqs.n_seqs] : 0;
  if (a.norm.out.raw() != nullptr && r_end > r_begin) {
    gated_rms_norm_ref({.o = a.out.slice(0, r_begin, r_end),
                        .z = a.norm.z.slice(0, r_begin, r_end),
                        .weight = a.norm.weight,
                        .out = a.norm.out.slice(0, r_begin, r_end),
                        .eps = a.norm.eps},
                       ctx);
  }
}

std::string gated_delta_rule_paths(Device device, int64_t d_k, int64_t d_v) {
#ifdef TANDEM_CUDA
  if (device == Device::kCuda) return gated_delta_rule_cuda_paths(d_k, d_v);
#endif
  (void)device, (void)d_k, (void)d_v;
  return "gated delta rule: fp32 reference, token by token for decode/verify, chunked for prefill";
}

}  // namespace tandem::kernels
