// Conformance of the batched CUDA ops that carry GDN state against their references: conv1d with a
// speculative history per slot (kSpec, kCompact) and the gated delta rule (fold, recurrent,
// chunked and its fallback, fused output norm). Mixed batches: 1..256 sequences, 0..9 verify rows,
// prefill chunks of 1..300 rows at start positions off the 64 grid, shuffled slots, n_acc 0..T,
// both parities, rows after other sub-batches' rows, padding sequences sharing a scratch slot.
// Outputs, history, state and replay are compared; rows and slots outside the call must stay as
// they were.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/conv1d/conv1d.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_rms_norm/gated_rms_norm.h"

namespace tandem::test {
namespace {

using namespace tandem::kernels;

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 12; ++i) s += fmt::format("{}{}", i ? "/" : "", v[i]);
  return v.size() > 12 ? s + fmt::format("/..({} seqs)", v.size()) : s;
}

std::vector<int64_t> random_rows(int64_t n, int64_t max_rows, Rng& rng) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (auto& x : r) x = rng.index(static_cast<int32_t>(max_rows + 1));
  r[rng.index(static_cast<int32_t>(n))] = max_rows;  // the bound is reached
  return r;
}

// ---- conv1d ----

struct ConvCase {
  int64_t channels, kernel;
  ConvHistoryMode mode;
  std::vector<int64_t> rows;  // per sequence
  DType w_dt = DType::kBF16;
  int64_t first_row = 0, extra_max_rows = 0;  // rows of other sub-batches before; a loose bound
  int64_t n_padding = 0;                      // extra sequences sharing one scratch slot
};

void run_conv(const ConvCase& c, Rng& rng, const CudaStream& cs) {
  const bool spec = c.mode == ConvHistoryMode::kSpec;
  std::vector<int64_t> rows = c.rows;
  const int64_t n_real = static_cast<int64_t>(rows.size()), window = c.kernel - 1;
  for (int64_t i = 0; i < c.n_padding; ++i) rows.push_back(1 + rng.index(4));
  const int64_t n_seqs = static_cast<int64_t>(rows.size());
  const int64_t max_rows = *std::max_element(rows.begin(), rows.end()) + c.extra_max_rows;
  const int64_t hist_len = window + (spec ? max_rows : 9);
  const int64_t n_slots = n_real + 4;
  const std::vector<int32_t> rs = row_starts(rows, c.first_row);
  const int64_t n_rows = rs.back() + 3;  // and rows of another sub-batch after
  std::vector<int32_t> slots = distinct_slots(n_real + 1, n_slots, rng), n_acc;
  const int32_t scratch = slots.back();
  slots.pop_back();
  for (int64_t i = 0; i < c.n_padding; ++i) slots.push_back(scratch);
  for (int64_t s = 0; s < n_seqs; ++s) n_acc.push_back(rng.index(hist_len - window + 1));
  const std::vector<int32_t> zeros(static_cast<size_t>(n_seqs), 0);
  Mirror x = random_mirror({n_rows, c.channels + 16}, rng, DType::kBF16, 0.05f, 2.f);
  Mirror w = random_mirror({c.channels, 1, c.kernel}, rng, c.w_dt);
  Mirror hist = random_mirror({n_slots, c.channels, hist_len}, rng, DType::kBF16, 0.05f, 2.f);
  const auto xv = [&](const Tensor& t) { return t.slice(1, 0, c.channels); };
  // The reference runs the real sequences only (the padding is the slice's tail).
  const SeqArrays h = seq_arrays(rs, slots, n_acc, zeros, zeros, Device::kCpu);
  Tensor ref_hist = hist.host.to(Device::kCpu);
  Tensor ref_out = Tensor::zeros({n_rows, c.channels}, DType::kF32);
  const SeqLayout all_h{n_seqs, max_rows, h.row_start};
  conv1d_ref({.x = xv(x.host),
              .weight = w.host,
              .history = ref_hist,
              .out = ref_out,
              .seqs = all_h.slice(0, n_real),
              .slot = h.slot.slice(0, 0, n_real),
              .n_acc = h.n_acc.slice(0, 0, n_real),
              .mode = c.mode},
             ref_ctx());
  const SeqArrays d = seq_arrays(rs, slots, n_acc, zeros, zeros, Device::kCuda);
  Tensor out = poisoned({n_rows, c.channels}, DType::kBF16);
  conv1d_cuda({.x = xv(x.dev),
               .weight = w.dev,
               .history = hist.dev,
               .out = out,
               .seqs = {n_seqs, max_rows, d.row_start},
               .slot = d.slot,
               .n_acc = d.n_acc,
               .mode = c.mode},
              cs.ctx());
  cs.sync();
  const std::string p = fmt::format(
      "rows={},first_row={},max_rows={},channels={},kernel={},mode={},weight={},padding={}",
      join(c.rows), c.first_row, max_rows, c.channels, c.kernel, spec ? "spec" : "compact",
      dtype_name(c.w_dt), c.n_padding);
  const std::vector<int32_t> real_rs(rs.begin(), rs.begin() + n_real + 1);
  check_case("conv1d", p,
             max_rel_l2(download(out), gather(ref_out), seq_ranges(real_rs, c.channels)),
             DType::kBF16);
  // The history holds raw inputs: exact, for the real slots and every untouched one.
  std::vector<float> got_hist = download(hist.dev), want_hist = gather(ref_hist);
  const int64_t slot_elems = c.channels * hist_len;
  std::fill(got_hist.begin() + scratch * slot_elems, got_hist.begin() + (scratch + 1) * slot_elems,
            0.f);
  std::fill(want_hist.begin() + scratch * slot_elems,
            want_hist.begin() + (scratch + 1) * slot_elems, 0.f);
  check_bits("conv1d.history", p, got_hist == want_hist);
  const auto bits = download_bits<uint16_t>(out);
  check_bits("conv1d.rows_outside", p,
             rows_poisoned(bits, 0, rs[0], c.channels) &&
                 rows_poisoned(bits, rs.back(), n_rows - rs.back(), c.channels));
}

TEST(CudaConformance, Conv1dBatched) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(14);
  using M = ConvHistoryMode;
  for (const int64_t kernel : {4, 3, 2}) {
    // Decode and verify (kSpec): one sequence, mixed batches with empty sequences, the model's
    // channel count, a bucket bound above the rows, padding on a shared scratch slot, 256 seqs.
    run_conv({100, kernel, M::kSpec, {1}, DType::kF32}, rng, cs);
    run_conv({4100, kernel, M::kSpec, {9, 0, 3, 1, 5}, DType::kBF16, 7, 2}, rng, cs);
    run_conv({10240, kernel, M::kSpec, {4, 2, 9}, DType::kBF16, 0, 0, 3}, rng, cs);
    run_conv({1000, kernel, M::kSpec, random_rows(256, 9, rng), DType::kBF16, 3}, rng, cs);
    // Prefill chunks (kCompact): through the one-thread-per-channel kernel (<= 64 rows) and the
    // row-chunk kernel, with loose bounds (grid rows past every sequence) and n_acc 0 or not.
    run_conv({100, kernel, M::kCompact, {1}, DType::kF32}, rng, cs);
    run_conv({4100, kernel, M::kCompact, {64, 2, 0, 17}, DType::kBF16, 5}, rng, cs);
    run_conv({4100, kernel, M::kCompact, {300, 0, 19, 65, 1, 2}, DType::kBF16, 5}, rng, cs);
    run_conv({1000, kernel, M::kCompact, {130, 7}, DType::kBF16, 0, 100}, rng, cs);
    run_conv({300, kernel, M::kCompact, random_rows(40, 300, rng), DType::kBF16, 2, 0, 2}, rng, cs);
  }
}

// ---- gated delta rule ----

struct GdrShape {
  int64_t hk, hv, dk, dv;
};

// One sequence of a call: its rows and per-sequence values.
struct GdrSeq {
  int64_t rows;
  int32_t n_acc, parity, start;
};

struct GdrCase {
  GdrShape s;
  GdrMode mode;
  std::vector<GdrSeq> seqs;
  bool norm = false;
  int64_t first_row = 0, extra_max_rows = 0;
  int chunk_size = 64;
  int64_t qk_offset = 0;  // 1: q/k views not 4-byte aligned (the chunked kernel's fallback)
  int64_t n_padding = 0;  // extra sequences sharing one scratch slot (kRecurrent)
};

std::vector<GdrSeq> recurrent_seqs(const std::vector<int64_t>& rows, int64_t replay_rows,
                                   Rng& rng) {
  std::vector<GdrSeq> s;
  for (const int64_t n : rows)
    s.push_back({n, rng.index(static_cast<int32_t>(replay_rows + 1)), rng.index(2), 0});
  return s;
}

std::vector<GdrSeq> chunked_seqs(const std::vector<int64_t>& rows, Rng& rng) {
  std::vector<GdrSeq> s;
  for (const int64_t n : rows) {
    int32_t start = rng.index(3000);
    if (start % 64 == 0) start += 1 + rng.index(63);
    s.push_back({n, 0, 0, start});
  }
  return s;
}

void run_gdr(const GdrCase& c, Rng& rng, const CudaStream& cs) {
  const GdrShape& s = c.s;
  const bool recurrent = c.mode == GdrMode::kRecurrent;
  std::vector<GdrSeq> seqs = c.seqs;
  const int64_t n_real = static_cast<int64_t>(seqs.size());
  for (int64_t i = 0; i < c.n_padding; ++i)
    seqs.push_back({1 + rng.index(9), rng.index(10), rng.index(2), 0});
  const int64_t n_seqs = static_cast<int64_t>(seqs.size());
  std::vector<int64_t> rows;
  std::vector<int32_t> n_acc, parity, start;
  for (const GdrSeq& q : seqs) {
    rows.push_back(q.rows);
    n_acc.push_back(q.n_acc);
    parity.push_back(q.parity);
    start.push_back(q.start);
  }
  const int64_t max_rows = *std::max_element(rows.begin(), rows.end()) + c.extra_max_rows;
  const int64_t replay_rows = recurrent ? std::max<int64_t>(max_rows, 9) : 3;
  const int64_t n_slots = n_real + 3, width = gdr_replay_width(s.hk, s.dk, s.hv, s.dv);
  std::vector<int32_t> slots = distinct_slots(n_real + 1, n_slots, rng);
  const int32_t scratch = slots.back();
  slots.pop_back();
  for (int64_t i = 0; i < c.n_padding; ++i) slots.push_back(scratch);
  const std::vector<int32_t> rs = row_starts(rows, c.first_row);
  const int64_t n_rows = rs.back() + 2;
  // Inputs as strided views: q | k | pad per key head (offset by qk_offset), v | pad, a | b, z |
  // pad.
  Mirror qk = random_mirror({n_rows, s.hk, 2 * s.dk + 8}, rng);
  Mirror v = random_mirror({n_rows, s.hv, s.dv + 8}, rng);
  Mirror ab = random_mirror({n_rows, 2 * s.hv}, rng, DType::kBF16, 0.05f, 2.f);
  Mirror z = random_mirror({n_rows, s.hv, s.dv + 8}, rng, DType::kBF16, 0.05f, 3.f);
  Tensor a_log_h = Tensor::zeros({s.hv}, DType::kF32);
  for (int64_t h = 0; h < s.hv; ++h)
    a_log_h.data<float>()[h] = bf16_to_f32(f32_to_bf16(std::log(1.f + 15.f * (h + 0.5f) / s.hv)));
  Mirror a_log = mirror(a_log_h, DType::kF32);
  Mirror dt_bias = random_mirror({s.hv}, rng, DType::kBF16, 0.05f, 0.5f);
  Mirror norm_w = random_mirror({s.dv}, rng, DType::kBF16, 0.5f, 1.5f);
  Mirror state = random_mirror({n_slots, s.hv, s.dk, s.dv}, rng, DType::kF32, 0.01f, 0.3f);
  Mirror replay = random_mirror({n_slots, 2, replay_rows, width}, rng, DType::kBF16, 0.05f, 2.f);
  const int64_t o = c.qk_offset;
  const auto q_of = [&](const Tensor& t) { return t.slice(2, o, o + s.dk); };
  const auto k_of = [&](const Tensor& t) { return t.slice(2, o + s.dk, o + 2 * s.dk); };
  const auto v_of = [&](const Tensor& t) { return t.slice(2, 0, s.dv); };
  const auto a_of = [&](const Tensor& t) { return t.slice(1, 0, s.hv); };
  const auto b_of = [&](const Tensor& t) { return t.slice(1, s.hv, 2 * s.hv); };
  const auto args = [&](bool dev, const SeqArrays& m, int64_t n, const Tensor& st, const Tensor& rp,
                        const Tensor& out, const Tensor& normed) {
    const auto pick = [&](const Mirror& x) { return dev ? x.dev : x.host; };
    return GatedDeltaRuleArgs{
        .q = q_of(pick(qk)),
        .k = k_of(pick(qk)),
        .v = v_of(pick(v)),
        .a = a_of(pick(ab)),
        .b = b_of(pick(ab)),
        .a_log = pick(a_log),
        .dt_bias = pick(dt_bias),
        .state = st,
        .replay = rp,
        .out = out,
        .seqs = SeqLayout{n_seqs, max_rows, m.row_start}.slice(0, n),
        .slot = m.slot.slice(0, 0, n),
        .n_acc = m.n_acc.slice(0, 0, n),
        .parity = m.parity.slice(0, 0, n),
        .start_position = m.start.slice(0, 0, n),
        .mode = c.mode,
        .chunk_size = c.chunk_size,
        .norm = normed.raw() ? GdrOutputNorm{v_of(pick(z)), pick(norm_w), normed, 1e-6f}
                             : GdrOutputNorm{}};
  };
  // The reference over the real sequences (padding is the slice's tail).
  const SeqArrays mh = seq_arrays(rs, slots, n_acc, parity, start, Device::kCpu);
  Tensor ref_state = state.host.to(Device::kCpu), ref_replay = replay.host.to(Device::kCpu);
  Tensor ref_out = Tensor::zeros({n_rows, s.hv, s.dv}, DType::kF32);
  Tensor ref_norm = c.norm ? Tensor::zeros({n_rows, s.hv, s.dv}, DType::kF32) : Tensor();
  gated_delta_rule_ref(args(false, mh, n_real, ref_state, ref_replay, ref_out, ref_norm),
                       ref_ctx());
  const SeqArrays md = seq_arrays(rs, slots, n_acc, parity, start, Device::kCuda);
  Tensor out = poisoned({n_rows, s.hv, s.dv}, DType::kBF16);
  Tensor normed = c.norm ? poisoned({n_rows, s.hv, s.dv}, DType::kBF16) : Tensor();
  // A second run from the same pools without the norm, then the separate op over the call's rows:
  // the fused norm must give its bits.
  Tensor state2 = state.host.to(Device::kCuda), replay2 = mirror(replay.host, DType::kBF16).dev;
  Tensor out2 = poisoned({n_rows, s.hv, s.dv}, DType::kBF16);
  Tensor normed2 = poisoned({n_rows, s.hv, s.dv}, DType::kBF16);
  gated_delta_rule_cuda(args(true, md, n_seqs, state.dev, replay.dev, out, normed), cs.ctx());
  if (c.norm) {
    gated_delta_rule_cuda(args(true, md, n_seqs, state2, replay2, out2, Tensor()), cs.ctx());
    gated_rms_norm_cuda({.o = out2.slice(0, rs[0], rs.back()),
                         .z = v_of(z.dev).slice(0, rs[0], rs.back()),
                         .weight = norm_w.dev,
                         .out = normed2.slice(0, rs[0], rs.back()),
                         .eps = 1e-6f},
                        cs.ctx());
  }
  cs.sync();
  std::string p = fmt::format(
      "rows={},heads_k={},heads_v={},d_k={},d_v={},mode={},norm={},first_row={},max_rows={}",
      join(std::vector<int64_t>(rows.begin(), rows.begin() + n_real)), s.hk, s.hv, s.dk, s.dv,
      recurrent ? "recurrent" : "chunked", c.norm, c.first_row, max_rows);
  if (c.chunk_size != 64 || c.qk_offset != 0)
    p += fmt::format(",chunk_size={},qk_offset={}", c.chunk_size, c.qk_offset);
  if (c.n_padding > 0) p += fmt::format(",padding={}", c.n_padding);
  const std::vector<int32_t> real_rs(rs.begin(), rs.begin() + n_real + 1);
  const int64_t row_elems = s.hv * s.dv, slot_elems = s.hv * s.dk * s.dv;
  check_case("gated_delta_rule", p,
             max_rel_l2(download(out), gather(ref_out), seq_ranges(real_rs, row_elems)),
             DType::kBF16);
  if (c.norm) {
    check_case("gated_delta_rule.norm", p,
               max_rel_l2(download(normed), gather(ref_norm), seq_ranges(real_rs, row_elems)),
               DType::kBF16);
  }
  const std::vector<int32_t> real_slots(slots.begin(), slots.begin() + n_real);
  std::vector<int32_t> touched = real_slots;
  touched.push_back(scratch);
  const std::vector<float> got_state = download(state.dev), want_state = gather(ref_state);
  check_case("gated_delta_rule.state", p,
             max_rel_l2(got_state, want_state, slot_ranges(real_slots, slot_elems)), DType::kF32);
  check_bits("gated_delta_rule.state_untouched", p,
             other_slots_equal(got_state, want_state, touched, slot_elems));
  // The replay rows are raw inputs: exact (kChunked writes none).
  const int64_t replay_elems = 2 * replay_rows * width;
  const std::vector<float> got_replay = download(replay.dev), want_replay = gather(ref_replay);
  check_bits("gated_delta_rule.replay", p,
             other_slots_equal(got_replay, want_replay, {scratch}, replay_elems));
  const auto bits = download_bits<uint16_t>(out);
  bool outside = rows_poisoned(bits, 0, rs[0], row_elems) &&
                 rows_poisoned(bits, rs.back(), n_rows - rs.back(), row_elems);
  if (c.norm) {
    const auto nbits = download_bits<uint16_t>(normed);
    outside = outside && rows_poisoned(nbits, 0, rs[0], row_elems) &&
              rows_poisoned(nbits, rs.back(), n_rows - rs.back(), row_elems);
    // Padding rows are compared too: the scratch slot's races touch no output of another row.
    check_bits(
        "gated_delta_rule.norm_fused", p,
        c.n_padding > 0 ||
            (bytes_of(out) == bytes_of(out2) && bytes_of(normed) == bytes_of(normed2) &&
             bytes_of(state.dev) == bytes_of(state2) && bytes_of(replay.dev) == bytes_of(replay2)));
  }
  check_bits("gated_delta_rule.rows_outside", p, outside);
}

const GdrShape kModel{16, 48, 128, 128};  // Qwen3.5-27B

TEST(CudaConformance, GatedDeltaRuleRecurrentBatched) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(15);
  const GdrMode m = GdrMode::kRecurrent;
  // d_v 16 and 24: one block, part idle; 96: a cluster of 3; 128: the model; 256: norm not fused.
  for (const GdrShape& s :
       {GdrShape{2, 6, 128, 128}, GdrShape{1, 3, 64, 96}, GdrShape{3, 3, 256, 64},
        GdrShape{1, 2, 16, 16}, GdrShape{2, 4, 32, 24}, GdrShape{1, 2, 64, 256}, kModel}) {
    for (const bool norm : {false, true}) {
      run_gdr({s, m, {{1, 1, 0, 0}}, norm}, rng, cs);                // plain decode
      run_gdr({s, m, {{9, 9, 1, 0}}, norm, 3}, rng, cs);             // a full verify
      run_gdr({s, m, {{0, 4, 0, 0}}, norm}, rng, cs);                // fold only
      run_gdr({s, m, {{1, 0, 1, 0}, {0, 0, 0, 0}}, norm}, rng, cs);  // nothing to fold
      run_gdr({s, m, recurrent_seqs({3, 0, 9, 1, 5, 2, 7}, 9, rng), norm, 5, 2}, rng, cs);
    }
  }
  // Many sequences (the largest graph bucket), with padding on a shared scratch slot.
  for (const GdrShape& s : {GdrShape{2, 4, 32, 32}, GdrShape{1, 2, 128, 128}}) {
    run_gdr({s, m, recurrent_seqs(random_rows(256, 9, rng), 9, rng), true, 1}, rng, cs);
    run_gdr({s, m, recurrent_seqs(random_rows(29, 4, rng), 9, rng), true, 0, 5, 64, 0, 3}, rng, cs);
  }
  run_gdr({kModel, m, recurrent_seqs(random_rows(8, 4, rng), 9, rng), true, 2}, rng, cs);
}

TEST(CudaConformance, GatedDeltaRuleChunkedBatched) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(16);
  const GdrMode m = GdrMode::kChunked;
  for (const GdrShape& s : {GdrShape{2, 6, 128, 128}, GdrShape{1, 3, 64, 96},
                            GdrShape{3, 3, 256, 64}, GdrShape{1, 2, 16, 32}}) {
    run_gdr({s, m, chunked_seqs({1}, rng)}, rng, cs);
    run_gdr({s, m, chunked_seqs({300}, rng), true, 4}, rng, cs);
    run_gdr({s, m, chunked_seqs({1, 19, 65, 0, 111, 130, 64}, rng), true, 3, 20}, rng, cs);
    run_gdr({s, m, {{64, 0, 0, 0}, {65, 0, 0, 128}, {63, 0, 0, 1}}}, rng, cs);  // aligned starts
    // Outside the WY kernel (chunk 32; q/k views at an odd offset): the recurrence fallback.
    run_gdr({s, m, chunked_seqs({100, 7, 0}, rng), true, 2, 0, 32}, rng, cs);
    run_gdr({s, m, chunked_seqs({65, 3}, rng), false, 0, 0, 64, 1}, rng, cs);
  }
  run_gdr({kModel, m, {{1024, 0, 0, 0}}}, rng, cs);
  run_gdr({kModel, m, {{300, 0, 0, 100}, {77, 0, 0, 37}, {0, 0, 0, 5}}, true, 9}, rng, cs);
}

}  // namespace
}  // namespace tandem::test
