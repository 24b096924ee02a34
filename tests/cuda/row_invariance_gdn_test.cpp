// Bitwise invariants of the batched CUDA GDN-state kernels (DESIGN.md invariants 2, 3, 5):
//   batch invariance: a sequence's outputs, committed state, replay rows and conv history have the
//     same bits whatever else shares the launch, wherever its rows sit, whichever its slot;
//   the fold: steps of T rows, n_acc of them folded by the next step, leave the committed state of
//     a token-by-token run (T = 1 steps) over the accepted rows, and every verify row's output is
//     the output of that row stepped alone; the replay rows are the raw inputs;
//   conv: outputs and the committed window equal token-by-token steps;
//   the streaming recurrence (many sequences) gives the per-sequence grid's bits;
//   PDL: a layer's launches back to back (each may start before its predecessor ends) give the
//     bits of the same launches with a synchronisation after each.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/conv1d/conv1d.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"

namespace tandem::test {
namespace {

using namespace tandem::kernels;

struct GdrShape {
  int64_t hk, hv, dk, dv;
};
const GdrShape kModel{16, 48, 128, 128};  // Qwen3.5-27B

// One GDN layer on the device: its parameters and pools (conv history, state, replay).
struct Layer {
  GdrShape s;
  int64_t n_slots, kernel = 4, replay_rows = 9;
  Tensor conv_w, a_log, dt_bias, norm_w, history, state, replay;
  int64_t kd() const { return s.hk * s.dk; }
  int64_t channels() const { return 2 * kd() + s.hv * s.dv; }
  int64_t width() const { return gdr_replay_width(s.hk, s.dk, s.hv, s.dv); }
  int64_t hist_len() const { return kernel - 1 + replay_rows; }
};

// Fresh random pools; the parameters are `params`' when given (two pool sets of one layer).
Layer make_layer(const GdrShape& s, int64_t n_slots, Rng& rng, const Layer* params = nullptr) {
  Layer L{s, n_slots};
  if (params != nullptr) {
    L.conv_w = params->conv_w, L.a_log = params->a_log, L.dt_bias = params->dt_bias;
    L.norm_w = params->norm_w;
  } else {
    L.conv_w = random_mirror({L.channels(), 1, L.kernel}, rng).dev;
    L.a_log = random_mirror({s.hv}, rng, DType::kF32, 0.05f, 2.f).dev;
    L.dt_bias = random_mirror({s.hv}, rng, DType::kBF16, 0.05f, 0.5f).dev;
    L.norm_w = random_mirror({s.dv}, rng, DType::kBF16, 0.5f, 1.5f).dev;
  }
  L.history =
      random_mirror({n_slots, L.channels(), L.hist_len()}, rng, DType::kBF16, 0.05f, 2.f).dev;
  L.state = random_mirror({n_slots, s.hv, s.dk, s.dv}, rng, DType::kF32, 0.01f, 0.3f).dev;
  L.replay = random_mirror({n_slots, 2, L.replay_rows, L.width()}, rng, DType::kBF16).dev;
  return L;
}

void copy_slot(const Layer& dst, int32_t to, const Layer& src, int32_t from) {
  copy_dim0(dst.history, to, src.history, from);
  copy_dim0(dst.state, to, src.state, from);
  copy_dim0(dst.replay, to, src.replay, from);
}

// One call's rows on the device: the GDN inputs (q | k | pad per key head, v | pad, a | b,
// z | pad) and the conv input (x | pad), all row-major with dim 0 the row.
struct Rows {
  Tensor qk, v, ab, z, x;
};
Rows random_rows(const Layer& L, int64_t n, Rng& rng) {
  const GdrShape& s = L.s;
  return {random_mirror({n, s.hk, 2 * s.dk + 8}, rng).dev,
          random_mirror({n, s.hv, s.dv + 8}, rng).dev,
          random_mirror({n, 2 * s.hv}, rng, DType::kBF16, 0.05f, 2.f).dev,
          random_mirror({n, s.hv, s.dv + 8}, rng, DType::kBF16, 0.05f, 3.f).dev,
          random_mirror({n, L.channels() + 8}, rng, DType::kBF16, 0.05f, 2.f).dev};
}
void copy_rows(const Rows& dst, int64_t to, const Rows& src, int64_t from, int64_t n) {
  for (const auto& [d, s] :
       {std::pair{&dst.qk, &src.qk}, std::pair{&dst.v, &src.v}, std::pair{&dst.ab, &src.ab},
        std::pair{&dst.z, &src.z}, std::pair{&dst.x, &src.x}})
    copy_dim0(*d, to, *s, from, n);
}
Rows row_of(const Rows& r, int64_t t) {
  return {dim0_copy(r.qk, t), dim0_copy(r.v, t), dim0_copy(r.ab, t), dim0_copy(r.z, t),
          dim0_copy(r.x, t)};
}

// The GDN inputs of a call: from the rows directly, or q/k/v from a conv output (the model).
struct GdrIn {
  Tensor q, k, v, a, b, z;
};
GdrIn gdr_in(const Layer& L, const Rows& r) {
  const GdrShape& s = L.s;
  return {r.qk.slice(2, 0, s.dk), r.qk.slice(2, s.dk, 2 * s.dk), r.v.slice(2, 0, s.dv),
          r.ab.slice(1, 0, s.hv), r.ab.slice(1, s.hv, 2 * s.hv), r.z.slice(2, 0, s.dv)};
}
GdrIn gdr_in_from_conv(const Layer& L, const Rows& r, const Tensor& conv_out) {
  const GdrShape& s = L.s;
  return {conv_out.slice(1, 0, L.kd()).split_heads(s.hk),
          conv_out.slice(1, L.kd(), 2 * L.kd()).split_heads(s.hk),
          conv_out.slice(1, 2 * L.kd(), L.channels()).split_heads(s.hv),
          r.ab.slice(1, 0, s.hv),
          r.ab.slice(1, s.hv, 2 * s.hv),
          r.z.slice(2, 0, s.dv)};
}

struct Seq {
  int64_t rows;
  int32_t slot, n_acc = 0, parity = 0, start = 0;
};
// A call's per-sequence arrays on the device (built before any launch that uses them).
struct Batch {
  SeqArrays d;
  std::vector<int32_t> rs;
  int64_t n, max_rows;
};
Batch make_batch(const std::vector<Seq>& seqs, int64_t first_row, int64_t max_rows = 9) {
  std::vector<int64_t> rows;
  std::vector<int32_t> slot, n_acc, parity, start;
  for (const Seq& q : seqs) {
    rows.push_back(q.rows);
    slot.push_back(q.slot);
    n_acc.push_back(q.n_acc);
    parity.push_back(q.parity);
    start.push_back(q.start);
  }
  const std::vector<int32_t> rs = row_starts(rows, first_row);
  return {seq_arrays(rs, slot, n_acc, parity, start, Device::kCuda), rs,
          static_cast<int64_t>(seqs.size()), max_rows};
}

// Sequences [b, e) of a batch (the sub-batch of one call, as the model makes it).
void gdr(const Layer& L, const GdrIn& in, const Batch& bt, int64_t b, int64_t e, GdrMode mode,
         const Tensor& out, const Tensor& normed, const CudaStream& cs) {
  gated_delta_rule_cuda(
      {.q = in.q,
       .k = in.k,
       .v = in.v,
       .a = in.a,
       .b = in.b,
       .a_log = L.a_log,
       .dt_bias = L.dt_bias,
       .state = L.state,
       .replay = L.replay,
       .out = out,
       .seqs = SeqLayout{bt.n, bt.max_rows, bt.d.row_start}.slice(b, e),
       .slot = bt.d.slot.slice(0, b, e),
       .n_acc = bt.d.n_acc.slice(0, b, e),
       .parity = bt.d.parity.slice(0, b, e),
       .start_position = bt.d.start.slice(0, b, e),
       .mode = mode,
       .chunk_size = 64,
       .norm = normed.raw() ? GdrOutputNorm{in.z, L.norm_w, normed, 1e-6f} : GdrOutputNorm{}},
      cs.ctx());
}
void conv(const Layer& L, const Rows& r, const Batch& bt, int64_t b, int64_t e,
          ConvHistoryMode mode, const Tensor& out, const CudaStream& cs) {
  conv1d_cuda({.x = r.x.slice(1, 0, L.channels()),
               .weight = L.conv_w,
               .history = L.history,
               .out = out,
               .seqs = SeqLayout{bt.n, bt.max_rows, bt.d.row_start}.slice(b, e),
               .slot = bt.d.slot.slice(0, b, e),
               .n_acc = bt.d.n_acc.slice(0, b, e),
               .mode = mode},
              cs.ctx());
}

Tensor out_rows(const Layer& L, int64_t n) { return poisoned({n, L.s.hv, L.s.dv}, DType::kBF16); }

// Bits of rows [r0, r0 + n) of a contiguous device tensor, and of one pool slot.
std::vector<uint8_t> rows_bits(const Tensor& t, int64_t r0, int64_t n) {
  return n == 0 ? std::vector<uint8_t>{} : bytes_of(t.slice(0, r0, r0 + n));
}
std::vector<uint8_t> slot_bits(const Tensor& pool, int32_t slot) {
  return bytes_of(pool.slice(0, slot, slot + 1));
}

// Sets which recurrent calls take the streaming kernel for one scope.
struct StreamMinSeqs {
  int64_t prev;
  explicit StreamMinSeqs(int64_t n) : prev(gated_delta_rule_set_stream_min_seqs(n)) {}
  ~StreamMinSeqs() { gated_delta_rule_set_stream_min_seqs(prev); }
};

// The streaming kernel's forms (each the same bits): four passes per row pair (plain), row pairs
// in three passes (production), or calls of 2+ rows a sequence in the register form (opt-in).
enum class StreamForm { kPlain, kPairs, kRegisters };
std::string form_name(StreamForm f) {
  return f == StreamForm::kPlain ? "plain" : f == StreamForm::kPairs ? "pairs" : "registers";
}
// Sets a form for one scope; taken() says whether a register-form call ran since.
struct StreamFormScope {
  bool prev_pairs, prev_regs;
  int64_t regs_calls;
  explicit StreamFormScope(StreamForm f)
      : prev_pairs(gated_delta_rule_set_stream_pairs(f == StreamForm::kPairs)),
        prev_regs(gated_delta_rule_set_stream_registers(f == StreamForm::kRegisters)),
        regs_calls(gated_delta_rule_stream_register_calls()) {}
  ~StreamFormScope() {
    gated_delta_rule_set_stream_pairs(prev_pairs);
    gated_delta_rule_set_stream_registers(prev_regs);
  }
  bool registers_taken() const { return gated_delta_rule_stream_register_calls() > regs_calls; }
};
constexpr StreamForm kForms[] = {StreamForm::kPlain, StreamForm::kPairs, StreamForm::kRegisters};

// ---- batch invariance ----

// A target sequence alone (row 0, slot 0 of pool A) and inside a batch of n_seqs (index k, its
// rows after first_row and the others', another slot of pool B holding the same content).
void batch_invariance(const GdrShape& s, GdrMode mode, int64_t n_seqs, Rng& rng,
                      const CudaStream& cs) {
  const bool rec = mode == GdrMode::kRecurrent;
  const int64_t n_slots = n_seqs + 2, k = rng.index(static_cast<int32_t>(n_seqs));
  const int64_t max_rows = rec ? 9 : 200;
  const Layer P = make_layer(s, 1, rng);  // the parameters every pool set shares
  const std::vector<int32_t> slots = distinct_slots(n_seqs, n_slots, rng);
  std::vector<Seq> seqs;
  for (int64_t i = 0; i < n_seqs; ++i) {
    const int64_t n = rng.index(static_cast<int32_t>(max_rows + 1));
    seqs.push_back({n, slots[i], rec ? rng.index(10) : 0, rng.index(2), rng.index(5000)});
  }
  if (seqs[k].rows == 0) seqs[k].rows = rec ? 9 : 130;
  const Seq t = seqs[k];
  // Alone, the bound is the sequence's own rows (another conv kernel for short prefill chunks).
  const Batch alone = make_batch({{t.rows, 0, t.n_acc, t.parity, t.start}}, 0, t.rows);
  const Batch batch = make_batch(seqs, 5, max_rows);
  const int64_t r0 = batch.rs[k], n_rows = batch.rs.back() + 2;
  const Rows r_batch = random_rows(P, n_rows, rng), r_alone = random_rows(P, t.rows, rng);
  copy_rows(r_alone, 0, r_batch, r0, t.rows);
  const std::string p = fmt::format(
      "mode={},n_seqs={},index={},rows={},n_acc={},parity={},start={},d_k={},d_v={}",
      rec ? "recurrent" : "chunked", n_seqs, k, t.rows, t.n_acc, t.parity, t.start, s.dk, s.dv);
  for (const bool norm : {false, true})
    for (const StreamForm form : kForms) {
      const Layer A = make_layer(s, n_slots, rng, &P), B = make_layer(s, n_slots, rng, &P);
      copy_slot(A, 0, B, t.slot);
      const Tensor out_a = out_rows(A, t.rows), out_b = out_rows(B, n_rows);
      const Tensor n_a = norm ? out_rows(A, t.rows) : Tensor();
      const Tensor n_b = norm ? out_rows(B, n_rows) : Tensor();
      {
        const StreamFormScope form_scope(form);
        gdr(A, gdr_in(A, r_alone), alone, 0, 1, mode, out_a, n_a, cs);
        gdr(B, gdr_in(B, r_batch), batch, 0, n_seqs, mode, out_b, n_b, cs);
      }
      cs.sync();
      const std::string pn = p + fmt::format(",norm={},form={}", norm, form_name(form));
      check_bits("gated_delta_rule.batch_rows", pn,
                 rows_bits(out_a, 0, t.rows) == rows_bits(out_b, r0, t.rows) &&
                     (!norm || rows_bits(n_a, 0, t.rows) == rows_bits(n_b, r0, t.rows)));
      check_bits("gated_delta_rule.batch_state", pn,
                 slot_bits(A.state, 0) == slot_bits(B.state, t.slot) &&
                     slot_bits(A.replay, 0) == slot_bits(B.replay, t.slot));
    }
  // conv1d over the same layout: kSpec for verify rows, kCompact for prefill chunks.
  const ConvHistoryMode cm = rec ? ConvHistoryMode::kSpec : ConvHistoryMode::kCompact;
  const Layer A = make_layer(s, n_slots, rng, &P), B = make_layer(s, n_slots, rng, &P);
  copy_slot(A, 0, B, t.slot);
  const Tensor c_a = poisoned({t.rows, P.channels()}, DType::kBF16);
  const Tensor c_b = poisoned({n_rows, P.channels()}, DType::kBF16);
  conv(A, r_alone, alone, 0, 1, cm, c_a, cs);
  conv(B, r_batch, batch, 0, n_seqs, cm, c_b, cs);
  cs.sync();
  check_bits("conv1d.batch_rows", p, rows_bits(c_a, 0, t.rows) == rows_bits(c_b, r0, t.rows));
  check_bits("conv1d.batch_history", p, slot_bits(A.history, 0) == slot_bits(B.history, t.slot));
}

// ---- the streaming kernel against the per-sequence grid ----

// One recurrent call of n_seqs sequences (0..9 rows and 0..9 rows to fold each, one with neither,
// one whose slot is outside the pool) through the per-sequence grid on pools A and through the
// streaming kernel on pools B holding the same contents: outputs (normed too), every state slot
// and every replay row equal bit for bit, with and without the fused norm, in each of the
// streaming kernel's forms (and the register form taken where it covers the shape).
void stream_matches(const GdrShape& s, int64_t n_seqs, Rng& rng, const CudaStream& cs) {
  const int64_t n_slots = n_seqs + 3;
  const Layer P = make_layer(s, 1, rng);
  const std::vector<int32_t> slots = distinct_slots(n_seqs, n_slots, rng);
  std::vector<Seq> seqs;
  for (int64_t i = 0; i < n_seqs; ++i)
    seqs.push_back({rng.index(10), slots[i], rng.index(10), rng.index(2)});
  const auto pick = [&] { return rng.index(static_cast<int32_t>(n_seqs)); };
  seqs[pick()].rows = 9;
  seqs[pick()].n_acc = 9;
  const int32_t single = pick();  // plain decode: one row after an odd fold
  seqs[single].rows = 1, seqs[single].n_acc = 3;
  const int32_t idle = pick(), outside = pick();
  seqs[idle].rows = 0, seqs[idle].n_acc = 0;
  seqs[outside].slot = static_cast<int32_t>(n_slots);
  const Batch bt = make_batch(seqs, 3);
  const int64_t n_rows = bt.rs.back() + 2;
  const Rows r = random_rows(P, n_rows, rng);
  const std::string p =
      fmt::format("n_seqs={},h_k={},h_v={},d_k={},d_v={}", n_seqs, s.hk, s.hv, s.dk, s.dv);
  for (const bool norm : {false, true})
    for (const StreamForm form : kForms) {
      const Layer A = make_layer(s, n_slots, rng, &P), B = make_layer(s, n_slots, rng, &P);
      for (int32_t i = 0; i < n_slots; ++i) copy_slot(B, i, A, i);
      const Tensor out_a = out_rows(A, n_rows), out_b = out_rows(B, n_rows);
      const Tensor n_a = norm ? out_rows(A, n_rows) : Tensor();
      const Tensor n_b = norm ? out_rows(B, n_rows) : Tensor();
      {
        const StreamMinSeqs per_sequence(n_seqs + 1);
        gdr(A, gdr_in(A, r), bt, 0, n_seqs, GdrMode::kRecurrent, out_a, n_a, cs);
      }
      bool registers_taken = false;
      {
        const StreamMinSeqs stream(1);
        const StreamFormScope form_scope(form);
        gdr(B, gdr_in(B, r), bt, 0, n_seqs, GdrMode::kRecurrent, out_b, n_b, cs);
        registers_taken = form_scope.registers_taken();
      }
      cs.sync();
      const std::string pn = p + fmt::format(",norm={},form={}", norm, form_name(form));
      // The register form takes every call of the streaming kernel's shapes (these have 9-row
      // sequences); the others fall back, as production does.
      const bool stream_shape =
          (s.dk == 64 || s.dk == 128) && s.dk <= s.dv && s.dv % 64 == 0 && s.dv <= 128;
      check_bits("gated_delta_rule.registers_taken", pn,
                 registers_taken == (form == StreamForm::kRegisters && stream_shape));
      check_bits("gated_delta_rule.stream_rows", pn,
                 bytes_of(out_a) == bytes_of(out_b) && (!norm || bytes_of(n_a) == bytes_of(n_b)));
      check_bits(
          "gated_delta_rule.stream_state", pn,
          bytes_of(A.state) == bytes_of(B.state) && bytes_of(A.replay) == bytes_of(B.replay));
    }
}

TEST(CudaRowInvariance, GdrStreamMatchesPerSequence) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(31);
  // The streaming kernel takes d_v 64 and 128 with d_k 64 or 128 <= d_v; d_v 96 and d_k 32 stay on
  // the per-sequence grid (both calls then run it).
  stream_matches(kModel, 8, rng, cs);
  stream_matches(kModel, 64, rng, cs);
  for (const GdrShape& s :
       {GdrShape{2, 6, 128, 128}, GdrShape{2, 4, 64, 64}, GdrShape{1, 3, 64, 128},
        GdrShape{1, 2, 64, 96}, GdrShape{2, 2, 32, 64}}) {
    stream_matches(s, 3 + rng.index(40), rng, cs);
  }
}

TEST(CudaRowInvariance, GdnBatchInvariance) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(24);
  for (const GdrMode mode : {GdrMode::kRecurrent, GdrMode::kChunked}) {
    batch_invariance({2, 6, 128, 128}, mode, 40, rng, cs);
    batch_invariance({1, 3, 64, 96}, mode, 7, rng, cs);
    batch_invariance(kModel, mode, 6, rng, cs);
  }
  batch_invariance({1, 2, 32, 32}, GdrMode::kRecurrent, 256, rng, cs);
}

// ---- the fold and the conv window against token-by-token steps ----

// One sequence's chain of verify steps: the rows of each step and how many the commit accepts
// (1..rows, 0 for a step without rows), and the parity of its first step.
struct Schedule {
  std::vector<int64_t> rows, acc;
  int32_t parity0 = 0;
};

Schedule random_schedule(int64_t steps, int64_t max_rows, bool allow_empty, Rng& rng) {
  Schedule s{{}, {}, rng.index(2)};
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t n = allow_empty ? rng.index(static_cast<int32_t>(max_rows + 1))
                                  : 1 + rng.index(static_cast<int32_t>(max_rows));
    s.rows.push_back(n);
    s.acc.push_back(n == 0 ? 0 : 1 + rng.index(static_cast<int32_t>(n)));
  }
  return s;
}

// The schedules of a chain: full accepts, first-draft rejects, plain decode, then random ones.
std::vector<Schedule> chain_schedules(Rng& rng) {
  return {Schedule{{9, 9, 1, 4, 2, 9, 3, 1}, {9, 1, 1, 2, 2, 9, 1, 1}, 0},
          Schedule{{1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1}, 1},
          random_schedule(8, 9, true, rng), random_schedule(8, 5, false, rng)};
}

// The replay row the rule must keep for row `row` of r: [k | v | a | b] as raw bf16 bits.
std::vector<uint16_t> expected_replay_row(const Layer& L, const Rows& r, int64_t row) {
  const GdrShape& s = L.s;
  const auto qk = download_bits<uint16_t>(r.qk), v = download_bits<uint16_t>(r.v),
             ab = download_bits<uint16_t>(r.ab);
  std::vector<uint16_t> e;
  for (int64_t h = 0; h < s.hk; ++h)
    for (int64_t i = 0; i < s.dk; ++i)
      e.push_back(qk[(row * s.hk + h) * (2 * s.dk + 8) + s.dk + i]);
  for (int64_t h = 0; h < s.hv; ++h)
    for (int64_t j = 0; j < s.dv; ++j) e.push_back(v[(row * s.hv + h) * (s.dv + 8) + j]);
  for (int64_t h = 0; h < 2 * s.hv; ++h) e.push_back(ab[row * 2 * s.hv + h]);
  return e;
}

// K sequences verify together (slots 0..K-1, fused norm) step after step, each committing its
// schedule; then a fold-only call commits the last step. Checks after every step: the replay rows
// are the raw inputs; each verify row's output and norm equal that row stepped alone (T = 1 from
// the committed state, slot 2K); and the committed state equals a token-by-token run over the
// accepted rows (slot K + q), bit for bit.
void fold_chain(const GdrShape& s, Rng& rng, const CudaStream& cs) {
  const std::vector<Schedule> sched = chain_schedules(rng);
  const int64_t K = static_cast<int64_t>(sched.size()), steps = 8;
  const int32_t shadow = static_cast<int32_t>(2 * K);
  const Layer L = make_layer(s, 2 * K + 1, rng);
  for (int32_t q = 0; q < K; ++q) copy_slot(L, K + q, L, q);
  std::vector<std::vector<std::vector<uint8_t>>> committed(K);  // [q][i]: after A_{q,i} tokens
  std::vector<std::vector<Rows>> accepted(K);
  for (int64_t i = 0; i <= steps; ++i) {  // step `steps`: the fold-only commit of the last one
    std::vector<Seq> seqs;
    for (int32_t q = 0; q < K; ++q) {
      const Schedule& c = sched[q];
      seqs.push_back({i < steps ? c.rows[i] : 0, q, i > 0 ? static_cast<int32_t>(c.acc[i - 1]) : 0,
                      static_cast<int32_t>((c.parity0 + i) % 2)});
    }
    const Batch b = make_batch(seqs, 2);
    const Rows r = random_rows(L, b.rs.back() + 1, rng);
    const Tensor out = out_rows(L, b.rs.back() + 1), normed = out_rows(L, b.rs.back() + 1);
    gdr(L, gdr_in(L, r), b, 0, K, GdrMode::kRecurrent, out, normed, cs);
    cs.sync();
    const auto replay = download_bits<uint16_t>(L.replay);
    for (int32_t q = 0; q < K; ++q) {
      committed[q].push_back(slot_bits(L.state, q));
      const Seq& sq = seqs[q];
      const std::string p = fmt::format("d_k={},d_v={},seq={},step={},rows={},n_acc={},parity={}",
                                        s.dk, s.dv, q, i, sq.rows, sq.n_acc, sq.parity);
      bool raw = true, rows_equal = true;
      for (int64_t t = 0; t < sq.rows; ++t) {
        const std::vector<uint16_t> e = expected_replay_row(L, r, b.rs[q] + t);
        const int64_t at = ((q * 2 + sq.parity) * L.replay_rows + t) * L.width();
        raw &= std::equal(e.begin(), e.end(), replay.begin() + at);
      }
      copy_dim0(L.state, shadow, L.state, q);  // the committed state the step started from
      for (int64_t t = 0; t < sq.rows; ++t) {
        const Batch one = make_batch({{1, shadow, t > 0 ? 1 : 0, static_cast<int32_t>(t % 2)}}, 0);
        const Rows row = row_of(r, b.rs[q] + t);
        const Tensor o1 = out_rows(L, 1), n1 = out_rows(L, 1);
        gdr(L, gdr_in(L, row), one, 0, 1, GdrMode::kRecurrent, o1, n1, cs);
        cs.sync();
        rows_equal &= rows_bits(out, b.rs[q] + t, 1) == bytes_of(o1) &&
                      rows_bits(normed, b.rs[q] + t, 1) == bytes_of(n1);
        if (i < steps && t < sched[q].acc[i]) accepted[q].push_back(row);
      }
      check_bits("gated_delta_rule.replay_raw", p, raw);
      check_bits("gated_delta_rule.verify_rows", p, rows_equal);
    }
  }
  for (int32_t q = 0; q < K; ++q) {  // token by token: call c folds token c - 1, steps token c
    const int32_t slot = static_cast<int32_t>(K + q);
    const int64_t n_tok = static_cast<int64_t>(accepted[q].size());
    std::vector<std::vector<uint8_t>> after;  // [c]: committed after c tokens
    for (int64_t c = 0; c <= n_tok; ++c) {
      const Batch one =
          make_batch({{c < n_tok ? 1 : 0, slot, c > 0 ? 1 : 0, static_cast<int32_t>(c % 2)}}, 0);
      const Rows row = c < n_tok ? accepted[q][c] : random_rows(L, 1, rng);
      gdr(L, gdr_in(L, row), one, 0, 1, GdrMode::kRecurrent, out_rows(L, 1), Tensor(), cs);
      cs.sync();
      after.push_back(slot_bits(L.state, slot));
    }
    int64_t a = 0;
    bool equal = true;
    for (int64_t i = 0; i <= steps; ++i) {
      equal &= committed[q][i] == after[a];
      if (i < steps) a += sched[q].acc[i];
    }
    check_bits("gated_delta_rule.fold_vs_tokens",
               fmt::format("d_k={},d_v={},seq={},tokens={}", s.dk, s.dv, q, n_tok), equal);
  }
}

TEST(CudaRowInvariance, GatedDeltaRuleFold) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(25);
  fold_chain({2, 6, 128, 128}, rng, cs);
  fold_chain({1, 3, 64, 96}, rng, cs);
  fold_chain(kModel, rng, cs);
}

// The conv history through the same kind of chain: a prefill chunk (kCompact; slots q and K + q
// get the same rows), then verify steps (kSpec) with the schedules' commits. Every verify row's
// output equals that row stepped alone from the history the step started from (slot 2K + q), and
// the window each commit leaves, H[acc : acc + Kc - 1], equals the window of a token-by-token run
// over the accepted rows (slot K + q), bit for bit.
void conv_chain(const GdrShape& s, Rng& rng, const CudaStream& cs) {
  const std::vector<Schedule> sched = chain_schedules(rng);
  const int64_t K = static_cast<int64_t>(sched.size()), steps = 8;
  const std::vector<int64_t> prefill = {5, 70, 1, 2};  // 70: the row-chunk kernel
  const Layer L = make_layer(s, 3 * K, rng);
  const int64_t C = L.channels(), H = L.hist_len(), W = L.kernel - 1;
  for (int32_t q = 0; q < K; ++q) copy_slot(L, K + q, L, q);
  std::vector<Seq> ps;
  for (int32_t q = 0; q < 2 * K; ++q) ps.push_back({prefill[q % K], q});
  const Batch pb = make_batch(ps, 1, 70);
  const Rows pr = random_rows(L, pb.rs.back(), rng);
  for (int64_t q = 0; q < K; ++q) copy_rows(pr, pb.rs[K + q], pr, pb.rs[q], prefill[q]);
  const Tensor pout = poisoned({pb.rs.back(), C}, DType::kBF16);
  conv(L, pr, pb, 0, 2 * K, ConvHistoryMode::kCompact, pout, cs);
  cs.sync();
  // window(h, off): channel-major bits of H[:, off : off + W] of one slot's history bits.
  const auto window = [&](const std::vector<uint16_t>& h, int64_t off) {
    std::vector<uint16_t> w;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < W; ++j) w.push_back(h[c * H + off + j]);
    return w;
  };
  const auto hist_bits = [&](int32_t slot) {
    return download_bits<uint16_t>(L.history.slice(0, slot, slot + 1));
  };
  std::vector<std::vector<std::vector<uint16_t>>> committed(K);  // [q][i]: after step i's commit
  std::vector<std::vector<Rows>> accepted(K);
  for (int64_t i = 0; i < steps; ++i) {
    std::vector<Seq> seqs;
    for (int32_t q = 0; q < K; ++q)
      seqs.push_back({sched[q].rows[i], q, i > 0 ? static_cast<int32_t>(sched[q].acc[i - 1]) : 0});
    const Batch b = make_batch(seqs, 2);
    const Rows r = random_rows(L, b.rs.back() + 1, rng);
    for (int32_t q = 0; q < K; ++q) copy_dim0(L.history, 2 * K + q, L.history, q);
    const Tensor out = poisoned({b.rs.back() + 1, C}, DType::kBF16);
    conv(L, r, b, 0, K, ConvHistoryMode::kSpec, out, cs);
    cs.sync();
    for (int32_t q = 0; q < K; ++q) {
      committed[q].push_back(window(hist_bits(q), sched[q].acc[i]));
      bool rows_equal = true;
      const int32_t x = static_cast<int32_t>(2 * K + q);
      for (int64_t t = 0; t < seqs[q].rows; ++t) {
        const Batch one = make_batch({{1, x, t > 0 ? 1 : seqs[q].n_acc}}, 0);
        const Rows row = row_of(r, b.rs[q] + t);
        const Tensor o1 = poisoned({1, C}, DType::kBF16);
        conv(L, row, one, 0, 1, ConvHistoryMode::kSpec, o1, cs);
        cs.sync();
        rows_equal &= rows_bits(out, b.rs[q] + t, 1) == bytes_of(o1);
        if (t < sched[q].acc[i]) accepted[q].push_back(row);
      }
      check_bits("conv1d.verify_rows",
                 fmt::format("seq={},step={},rows={},n_acc={}", q, i, seqs[q].rows, seqs[q].n_acc),
                 rows_equal);
    }
  }
  for (int32_t q = 0; q < K; ++q) {
    const int32_t slot = static_cast<int32_t>(K + q);
    std::vector<std::vector<uint16_t>> after{window(hist_bits(slot), 0)};  // [c]: after c tokens
    for (size_t c = 0; c < accepted[q].size(); ++c) {
      const Batch one = make_batch({{1, slot, c > 0 ? 1 : 0}}, 0);
      conv(L, accepted[q][c], one, 0, 1, ConvHistoryMode::kSpec, poisoned({1, C}, DType::kBF16),
           cs);
      cs.sync();
      after.push_back(window(hist_bits(slot), 1));
    }
    int64_t a = 0;
    bool equal = true;
    for (int64_t i = 0; i < steps; ++i) equal &= committed[q][i] == after[a += sched[q].acc[i]];
    check_bits("conv1d.window_vs_tokens",
               fmt::format("seq={},prefill={},tokens={},channels={}", q, prefill[q],
                           accepted[q].size(), C),
               equal && rows_bits(pout, pb.rs[q], prefill[q]) ==
                            rows_bits(pout, pb.rs[K + q], prefill[q]));
  }
}

TEST(CudaRowInvariance, Conv1dWindow) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(26);
  conv_chain({2, 6, 128, 128}, rng, cs);
  conv_chain(kModel, rng, cs);
}

// ---- programmatic dependent launch ----

// A GDN layer of the model, step after step: conv kSpec over the verify sequences, conv kCompact
// over the prefill chunks, the recurrent rule (fused norm) over the verify sequences, the chunked
// rule (norm) over the prefill chunks, q/k/v read from the conv output; every step's metadata and
// buffers made in advance. Back to back, each launch may start early and read (before its PDL
// wait) state, replay and history written two or more launches back; the bits must equal the
// same launches with a synchronisation after each.
void layer_steps(const GdrShape& s, Rng& rng, const CudaStream& cs) {
  const int64_t steps = 5, n_slots = 8;
  const std::vector<int32_t> slots = distinct_slots(5, n_slots, rng);  // P0 P1 V0 V1 V2
  std::vector<Batch> batches;
  std::vector<Rows> rows;
  std::vector<int64_t> m(3, 0);
  for (int64_t i = 0; i < steps; ++i) {
    std::vector<Seq> seqs = {{70, slots[0], 0, 0, static_cast<int32_t>(3 + 70 * i)},
                             {13, slots[1], 0, 0, static_cast<int32_t>(13 * i)}};
    for (int32_t q = 0; q < 3; ++q) {
      const int64_t n = 1 + rng.index(5);
      seqs.push_back(
          {n, slots[2 + q], static_cast<int32_t>(m[q]), static_cast<int32_t>((q + i) % 2)});
      m[q] = 1 + rng.index(static_cast<int32_t>(n));
    }
    batches.push_back(make_batch(seqs, 1, 70));
  }
  const Layer A = make_layer(s, n_slots, rng);
  const Layer B = make_layer(s, n_slots, rng, &A);
  copy_dim0(B.history, 0, A.history, 0, n_slots);
  copy_dim0(B.state, 0, A.state, 0, n_slots);
  copy_dim0(B.replay, 0, A.replay, 0, n_slots);
  for (const Batch& b : batches) rows.push_back(random_rows(A, b.rs.back() + 1, rng));
  struct StepOut {
    Tensor conv, out, normed;
  };
  const auto make_outs = [&]() {
    std::vector<StepOut> o;
    for (const Batch& b : batches) {
      const int64_t n = b.rs.back() + 1;
      o.push_back({poisoned({n, A.channels()}, DType::kBF16), out_rows(A, n), out_rows(A, n)});
    }
    return o;
  };
  const std::vector<StepOut> oa = make_outs(), ob = make_outs();
  const auto run = [&](const Layer& L, const std::vector<StepOut>& o, bool sync_each) {
    const auto done = [&]() {
      if (sync_each) cs.sync();
    };
    for (int64_t i = 0; i < steps; ++i) {
      const Batch& b = batches[i];
      conv(L, rows[i], b, 2, 5, ConvHistoryMode::kSpec, o[i].conv, cs), done();
      conv(L, rows[i], b, 0, 2, ConvHistoryMode::kCompact, o[i].conv, cs), done();
      const GdrIn in = gdr_in_from_conv(L, rows[i], o[i].conv);
      gdr(L, in, b, 2, 5, GdrMode::kRecurrent, o[i].out, o[i].normed, cs), done();
      gdr(L, in, b, 0, 2, GdrMode::kChunked, o[i].out, o[i].normed, cs), done();
    }
    cs.sync();
  };
  run(A, oa, false);
  run(B, ob, true);
  bool equal = true;
  for (int64_t i = 0; i < steps; ++i) {
    equal &= bytes_of(oa[i].conv) == bytes_of(ob[i].conv) &&
             bytes_of(oa[i].out) == bytes_of(ob[i].out) &&
             bytes_of(oa[i].normed) == bytes_of(ob[i].normed);
  }
  check_bits("gdn_layer.pdl_back_to_back", fmt::format("steps={},d_k={},d_v={}", steps, s.dk, s.dv),
             equal && bytes_of(A.history) == bytes_of(B.history) &&
                 bytes_of(A.state) == bytes_of(B.state) &&
                 bytes_of(A.replay) == bytes_of(B.replay));
}

TEST(CudaRowInvariance, GdnLayerStepsPdl) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(27);
  layer_steps({2, 6, 128, 128}, rng, cs);
  layer_steps(kModel, rng, cs);
}

}  // namespace
}  // namespace tandem::test
