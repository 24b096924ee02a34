// Conformance of the CUDA attention-family ops against their references: batched paged attention
// (decode family: 1..256 sequences of 0..16 rows, mixed tile/ring contexts up to 33K, a graph
// replayed with new metadata; prefill family: chunks of 1..300 rows), the paged KV write by slots
// and attention_inputs. Every call's rows sit at an offset inside larger q/out tensors, q and gate
// are strided halves of one q|gate buffer, block ids are shuffled and shared across sequences,
// the outputs and the decode workspace start poisoned, and rows outside the call must stay so.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/cuda_graph.h"
#include "cuda_test_util.h"
#include "kernels/attention/attention.h"
#include "kernels/attention_inputs/attention_inputs.h"
#include "kernels/kv_cache/kv_cache.h"
#include "kernels/rms_norm/rms_norm.h"

namespace tandem::test {
namespace {

using namespace tandem::kernels;

const std::vector<int64_t> kTokenCounts = {1, 2, 19, 65, 111};

std::string list_str(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 12; ++i) s += fmt::format("{}{}", i ? " " : "", v[i]);
  return v.size() > 12 ? s + fmt::format(" ...({})", v.size()) : s;
}

// One batched call: sequence s has rows[s] rows and kv[s] positions after the step.
struct Batch {
  int64_t hq, hkv, d, block_size;
  std::vector<int64_t> rows, kv;
  bool gated = true;
  bool prefill = false;
  int64_t first_row = 0, tail_rows = 0;  // q rows before and after the call's rows
  int64_t width = 0;                     // block-table width (0: the longest sequence's + 1)
  int64_t max_rows = 0;                  // SeqLayout::max_rows (0: the largest rows[s])
  std::string str() const {
    return fmt::format(
        "family={},heads_q={},heads_kv={},head_dim={},block_size={},n_seqs={},rows=[{}],kv=[{}],"
        "gated={},first_row={}",
        prefill ? "prefill" : "decode", hq, hkv, d, block_size, rows.size(), list_str(rows),
        list_str(kv), gated, first_row);
  }
};

// The call's inputs on both sides, and its results.
struct BatchRun {
  int64_t n_rows = 0, n_seqs = 0, width = 0, max_rows = 0;
  std::vector<int32_t> rs;
  Tensor ref_out;                  // f32 host [n_rows, hq, d]
  std::vector<float> out;          // the CUDA output, f32
  std::vector<uint16_t> out_bits;  // its bits
};

BatchRun run_batch(const Batch& b, Rng& rng, const CudaStream& cs) {
  BatchRun r;
  r.n_seqs = static_cast<int64_t>(b.rows.size());
  r.rs = row_starts(b.rows, b.first_row);
  r.n_rows = r.rs.back() + b.tail_rows;
  r.max_rows = b.max_rows;
  int64_t need_max = 1, need_sum = 0;
  for (int64_t s = 0; s < r.n_seqs; ++s) {
    r.max_rows = std::max(r.max_rows, b.rows[s]);
    const int64_t need = (b.kv[s] + b.block_size - 1) / b.block_size;
    need_max = std::max(need_max, need);
    need_sum += need;
  }
  r.width = b.width > 0 ? b.width : need_max + 1;
  // A pool that holds the longest sequence, and every sequence apart while it stays small.
  const int64_t cap = std::max<int64_t>(64, (int64_t{16} << 20) / (b.block_size * b.hkv * b.d));
  const int64_t n_blocks = std::max(need_max + 2, std::min(need_sum + 2, cap));
  const std::vector<int32_t> tables =
      random_block_tables(b.kv, r.width, n_blocks, b.block_size, rng);
  std::vector<int32_t> kv32(b.kv.begin(), b.kv.end());
  Mirror qg = random_mirror({r.n_rows, b.hq, 2 * b.d}, rng, DType::kBF16, 0.05f, 3.f);  // q | gate
  Mirror kc = random_mirror({n_blocks, b.block_size, b.hkv, b.d}, rng, DType::kBF16, 0.05f, 3.f);
  Mirror vc = random_mirror({n_blocks, b.block_size, b.hkv, b.d}, rng);
  const auto q_of = [&](const Tensor& t) { return t.slice(2, 0, b.d); };
  const auto g_of = [&](const Tensor& t) { return b.gated ? t.slice(2, b.d, 2 * b.d) : Tensor(); };
  r.ref_out = Tensor::zeros({r.n_rows, b.hq, b.d}, DType::kF32);
  const Tensor h_tables = host_i32_2d(tables, r.n_seqs, r.width);
  attention_ref({.q = q_of(qg.host),
                 .gate = g_of(qg.host),
                 .k_cache = kc.host,
                 .v_cache = vc.host,
                 .block_tables = h_tables,
                 .kv_len = host_i32(kv32),
                 .out = r.ref_out,
                 .seqs = {r.n_seqs, r.max_rows, host_i32(r.rs)},
                 .prefill = b.prefill},
                ref_ctx());
  Tensor out = poisoned({r.n_rows, b.hq, b.d}, DType::kBF16);
  // Exactly the floats the contract asks for, poisoned: a partial read but never written is NaN.
  const int64_t ws_rows = std::min(r.n_rows, r.n_seqs * r.max_rows);
  Tensor ws =
      b.prefill ? Tensor()
                : poisoned({std::max<int64_t>(1, attention_workspace_floats(
                                                     ws_rows, b.hq, b.d, r.width * b.block_size))},
                           DType::kF32);
  attention_cuda({.q = q_of(qg.dev),
                  .gate = g_of(qg.dev),
                  .k_cache = kc.dev,
                  .v_cache = vc.dev,
                  .block_tables = h_tables.to(Device::kCuda),
                  .kv_len = device_i32(kv32),
                  .out = out,
                  .seqs = {r.n_seqs, r.max_rows, device_i32(r.rs)},
                  .prefill = b.prefill,
                  .workspace = ws},
                 cs.ctx());
  cs.sync();
  r.out = download(out);
  r.out_bits = download_bits<uint16_t>(out);
  return r;
}

// Per sequence against the reference (the worst one is reported); rows outside the call untouched.
void check_batch(const Batch& b, const BatchRun& r) {
  const std::string op = b.prefill ? "attention.prefill" : "attention.decode";
  const int64_t row = b.hq * b.d;
  const std::vector<float> ref = gather(r.ref_out);
  double worst = 0.0;
  int64_t worst_seq = -1;
  for (int64_t s = 0; s < r.n_seqs; ++s) {
    const int64_t r0 = r.rs[s], n = r.rs[s + 1] - r0;
    if (n == 0) continue;
    const std::vector<float> o(r.out.begin() + r0 * row, r.out.begin() + (r0 + n) * row);
    const std::vector<float> e(ref.begin() + r0 * row, ref.begin() + (r0 + n) * row);
    const double err = rel_l2(o, e);
    if (!std::isnan(worst) && (std::isnan(err) || err > worst)) worst = err, worst_seq = s;
  }
  check_case(op, b.str() + fmt::format(",worst_seq={}", worst_seq), worst, DType::kBF16);
  const bool untouched = rows_poisoned(r.out_bits, 0, r.rs.front(), row) &&
                         rows_poisoned(r.out_bits, r.rs.back(), r.n_rows - r.rs.back(), row);
  check_bits(op + ".untouched_rows", b.str(), untouched);
}

void run_and_check(const Batch& b, Rng& rng, const CudaStream& cs) {
  check_batch(b, run_batch(b, rng, cs));
}

struct HeadShape {
  int64_t hq, hkv, d;
};

// One sequence per call, the old single-sequence sweep: q_len 1..9 and 16, contexts around the
// split granule and the tile/ring switch (4096), both block sizes, gated or not, at a row offset.
TEST(CudaConformance, AttentionDecodeOneSequence) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(11);
  const HeadShape shapes[] = {{24, 4, 256}, {6, 2, 128}, {7, 7, 64}, {8, 1, 128}};
  for (const HeadShape& h : shapes) {
    for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16}) {
      for (int64_t kv : {n, n + 36, int64_t{512}, int64_t{513}, int64_t{1500}, int64_t{4097}}) {
        const bool odd = (n + kv) % 2 == 1;
        Batch b{h.hq, h.hkv, h.d, odd ? 16 : 64, {n}, {kv}};
        b.gated = !odd || n == 1;
        b.first_row = odd ? 3 : 0;
        b.tail_rows = odd ? 0 : 2;
        run_and_check(b, rng, cs);
      }
    }
  }
}

// Random batches: rows[s] uniform in [lo_rows, hi_rows] (0 allowed), kv[s] = rows[s] plus a prior
// context, long (up to `long_kv`) for a fraction of the sequences.
Batch random_batch(HeadShape h, int64_t block_size, int64_t n_seqs, int64_t lo_rows,
                   int64_t hi_rows, int64_t short_kv, int64_t long_kv, int long_every, Rng& rng) {
  Batch b{h.hq, h.hkv, h.d, block_size};
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t n = lo_rows + rng.index(static_cast<int32_t>(hi_rows - lo_rows + 1));
    const bool is_long = long_every > 0 && rng.index(long_every) == 0;
    const int64_t prior = rng.index(static_cast<int32_t>(is_long ? long_kv : short_kv));
    b.rows.push_back(n);
    b.kv.push_back(std::max<int64_t>(1, n + prior));
  }
  b.first_row = rng.index(5);
  b.tail_rows = rng.index(5);
  return b;
}

// Mixed decode/verify batches in one call: ragged rows (0..16) and contexts (1 to 33K), sequences
// of both kernels' kv_len ranges side by side, 16-row sequences whose (row, head) pairs need two
// row blocks, uniform graph-like buckets, up to 256 sequences.
TEST(CudaConformance, AttentionDecodeBatch) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(15);
  // Hand-picked: 1 row at kv 1, a 0-row sequence, tile and ring contexts, 16 rows, 33K.
  Batch mixed{24, 4, 256, 64, {1, 4, 0, 16, 2, 3}, {1, 4100, 7, 513, 33000, 4096}};
  mixed.first_row = 2;
  mixed.tail_rows = 3;
  run_and_check(mixed, rng, cs);
  Batch group8{8, 1, 128, 16, {16, 1, 9, 0, 16}, {16, 4097, 600, 5, 9000}};
  group8.gated = false;
  run_and_check(group8, rng, cs);
  // Every sequence empty but one; and a call whose sequences all have 0 rows.
  run_and_check(Batch{6, 2, 128, 16, {0, 0, 3, 0}, {5, 9, 40, 1}}, rng, cs);
  Batch none{6, 2, 128, 16, {0, 0}, {5, 9}};
  none.tail_rows = 2;
  run_and_check(none, rng, cs);
  // A block table narrower than 4096 positions (no ring launch) and one much wider than the
  // contexts (ring launched, all its work absent).
  Batch narrow{24, 4, 256, 16, {2, 5, 1}, {700, 2000, 30}};
  narrow.width = 4096 / 16;
  run_and_check(narrow, rng, cs);
  Batch wide = narrow;
  wide.width = 40000 / 16;
  run_and_check(wide, rng, cs);
  // Uniform buckets (B sequences x 4 rows) at 1K and 32K.
  for (const int64_t kv : {1024, 32768}) {
    Batch bucket{24, 4, 256, 64, std::vector<int64_t>(8, 4), std::vector<int64_t>(8, kv)};
    bucket.max_rows = 4;
    run_and_check(bucket, rng, cs);
  }
  // Random batches.
  run_and_check(random_batch({24, 4, 256}, 64, 32, 1, 16, 3000, 20000, 4, rng), rng, cs);
  run_and_check(random_batch({6, 2, 128}, 16, 256, 0, 4, 2000, 9000, 10, rng), rng, cs);
  run_and_check(random_batch({7, 7, 64}, 16, 61, 1, 9, 1500, 6000, 3, rng), rng, cs);
  Batch bound = random_batch({8, 2, 64}, 16, 19, 1, 3, 900, 0, 0, rng);
  bound.max_rows = 16;  // a loose host bound: more row blocks and workspace rows than used
  run_and_check(bound, rng, cs);
}

// The decode family captured once in a CUDA graph (a bucket of 4 sequences x 4 rows), then
// replayed with new kv_len, row_start (row counts 0..4, a moved first row), block tables and q
// written into the same buffers: each replay matches the reference for its own metadata.
TEST(CudaConformance, AttentionDecodeGraphReplay) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(16);
  const int64_t hq = 24, hkv = 4, d = 256, bs = 16, n_seqs = 4, max_rows = 4, n_rows = 20;
  const int64_t width = 9100 / bs, n_blocks = width + 8;
  struct Step {
    std::vector<int64_t> rows, kv;
    int64_t first_row;
  };
  const Step steps[] = {{{1, 4, 2, 3}, {10, 5000, 600, 4096}, 0},
                        {{4, 0, 4, 1}, {9000, 3, 4097, 1}, 3},
                        {{2, 2, 2, 2}, {100, 100, 8000, 2000}, 1}};
  Mirror kc = random_mirror({n_blocks, bs, hkv, d}, rng, DType::kBF16, 0.05f, 3.f);
  Mirror vc = random_mirror({n_blocks, bs, hkv, d}, rng);
  Tensor qg = Tensor::zeros({n_rows, hq, 2 * d}, DType::kBF16, Device::kCuda);
  Tensor rs = Tensor::zeros({n_seqs + 1}, DType::kI32, Device::kCuda);
  Tensor kv_len = Tensor::zeros({n_seqs}, DType::kI32, Device::kCuda);
  Tensor tables = Tensor::zeros({n_seqs, width}, DType::kI32, Device::kCuda);
  Tensor out = Tensor::zeros({n_rows, hq, d}, DType::kBF16, Device::kCuda);
  Tensor ws = Tensor::zeros({attention_workspace_floats(n_seqs * max_rows, hq, d, width * bs)},
                            DType::kF32, Device::kCuda);
  const AttentionArgs args{.q = qg.slice(2, 0, d),
                           .gate = qg.slice(2, d, 2 * d),
                           .k_cache = kc.dev,
                           .v_cache = vc.dev,
                           .block_tables = tables,
                           .kv_len = kv_len,
                           .out = out,
                           .seqs = {n_seqs, max_rows, rs},
                           .prefill = false,
                           .workspace = ws};
  // Host mirrors of step i's metadata and q, written into the graph's buffers.
  std::vector<Mirror> qs;
  auto load = [&](int i) {
    const Step& st = steps[i];
    std::vector<int32_t> kv32(st.kv.begin(), st.kv.end());
    rs.copy_from(host_i32(row_starts(st.rows, st.first_row)));
    kv_len.copy_from(host_i32(kv32));
    tables.copy_from(
        host_i32_2d(random_block_tables(st.kv, width, n_blocks, bs, rng), n_seqs, width));
    qs.push_back(random_mirror({n_rows, hq, 2 * d}, rng, DType::kBF16, 0.05f, 3.f));
    qg.copy_from(qs.back().dev);
  };
  auto poison = [&] {  // a replay must write every row of the call and read only what it wrote
    detail::cuda_check(cudaMemset(out.raw(), 0xff, static_cast<size_t>(out.nbytes())), "memset");
    detail::cuda_check(cudaMemset(ws.raw(), 0xff, static_cast<size_t>(ws.nbytes())), "memset");
  };
  load(0);
  attention_cuda(args, cs.ctx());  // eager first: one-time set-up stays out of the capture
  cs.sync();
  CudaGraph graph;
  graph.begin_capture(cs.ctx().cuda_stream);
  attention_cuda(args, cs.ctx());
  graph.end_capture(cs.ctx().cuda_stream);
  for (int i = 0; i < 3; ++i) {
    if (i > 0) load(i);
    poison();
    graph.launch(cs.ctx().cuda_stream);
    cs.sync();
    const Step& st = steps[i];
    const std::vector<int32_t> r32 = row_starts(st.rows, st.first_row);
    std::vector<int32_t> kv32(st.kv.begin(), st.kv.end());
    Tensor ref = Tensor::zeros({n_rows, hq, d}, DType::kF32);
    const Tensor& q_host = qs[static_cast<size_t>(i)].host;
    attention_ref({.q = q_host.slice(2, 0, d),
                   .gate = q_host.slice(2, d, 2 * d),
                   .k_cache = kc.host,
                   .v_cache = vc.host,
                   .block_tables = tables.to(Device::kCpu),
                   .kv_len = host_i32(kv32),
                   .out = ref,
                   .seqs = {n_seqs, max_rows, host_i32(r32)}},
                  ref_ctx());
    const int64_t row = hq * d, r0 = r32.front(), r1 = r32.back();
    const std::vector<float> o = download(out), e = gather(ref);
    const std::string p = fmt::format("replay={},rows=[{}],kv=[{}],first_row={}", i,
                                      list_str(st.rows), list_str(st.kv), st.first_row);
    check_case("attention.decode.graph", p,
               rel_l2(std::vector<float>(o.begin() + r0 * row, o.begin() + r1 * row),
                      std::vector<float>(e.begin() + r0 * row, e.begin() + r1 * row)),
               DType::kBF16);
    const std::vector<uint16_t> bits = download_bits<uint16_t>(out);
    check_bits("attention.decode.graph.untouched_rows", p,
               rows_poisoned(bits, 0, r0, row) && rows_poisoned(bits, r1, n_rows - r1, row));
  }
}

// The prefill family: one sequence (16..300 rows, with and without prior context), then batches
// of chunks of 1..300 rows with ragged prior contexts and 0-row sequences.
TEST(CudaConformance, AttentionPrefill) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(12);
  for (const HeadShape& h : {HeadShape{24, 4, 256}, HeadShape{6, 3, 128}}) {
    for (int64_t n : {16, 19, 65, 111, 300}) {
      for (int64_t prior : {0, 700}) {
        Batch b{h.hq, h.hkv, h.d, 16, {n}, {n + prior}};
        b.prefill = true;
        b.first_row = prior == 0 ? 0 : 5;
        run_and_check(b, rng, cs);
      }
    }
  }
  Batch mixed{24, 4, 256, 64, {300, 1, 0, 77, 130}, {300, 5001, 3, 141, 4096}};
  mixed.prefill = true;
  mixed.first_row = 4;
  mixed.tail_rows = 9;
  run_and_check(mixed, rng, cs);
  for (const auto& [h, n_seqs] :
       {std::pair{HeadShape{6, 2, 128}, 17}, std::pair{HeadShape{8, 1, 64}, 9},
        std::pair{HeadShape{7, 7, 64}, 3}}) {
    Batch b = random_batch(h, 16, n_seqs, 0, 300, 2000, 0, 0, rng);
    b.prefill = true;
    run_and_check(b, rng, cs);
  }
}

// Contexts beyond 16K: one sequence, and next to short ones.
TEST(CudaConformance, AttentionLongContext) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(13);
  for (int64_t kv : {16384, 40000}) {
    for (int64_t n : {1, 4, 9}) run_and_check(Batch{24, 4, 256, 64, {n}, {kv}}, rng, cs);
  }
  run_and_check(Batch{24, 4, 256, 64, {3, 1, 5}, {200, 36000, 4000}}, rng, cs);
}

// Slots of n rows: distinct cache rows in random order, about one row in seven not written.
std::vector<int32_t> random_slots(int64_t n, int64_t cache_rows, Rng& rng) {
  const std::vector<int32_t> perm = shuffled_block_table(cache_rows, rng);
  std::vector<int32_t> slots(perm.begin(), perm.begin() + n);
  for (int32_t& s : slots) s = rng.index(7) == 0 ? -1 : s;
  return slots;
}

TEST(CudaConformance, KvCacheWrite) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(6);
  for (int64_t n : kTokenCounts) {
    const int64_t heads = 3, d = 128, block_size = 16, n_blocks = 20;
    const std::vector<int32_t> slots = random_slots(n, n_blocks * block_size, rng);
    Mirror kv = random_mirror({n, 2, heads, d}, rng);  // k and v are strided views
    Mirror kc = random_mirror({n_blocks, block_size, heads, d}, rng);
    Mirror vc = random_mirror({n_blocks, block_size, heads, d}, rng);
    Tensor ref_k = kc.host.to(Device::kCpu), ref_v = vc.host.to(Device::kCpu);
    kv_cache_write_ref({kv.host.select(1, 0), kv.host.select(1, 1), host_i32(slots), ref_k, ref_v},
                       ref_ctx());
    kv_cache_write_cuda(
        {kv.dev.select(1, 0), kv.dev.select(1, 1), device_i32(slots), kc.dev, vc.dev}, cs.ctx());
    cs.sync();
    const std::string p = fmt::format("n_rows={},heads_kv={},head_dim={}", n, heads, d);
    check_case("kv_cache_write", p, rel_l2(download(kc.dev), gather(ref_k)), DType::kBF16);
    check_case("kv_cache_write", p + ",v", rel_l2(download(vc.dev), gather(ref_v)), DType::kBF16);
  }
}

// q_norm and k_norm with RoPE, then the KV write, in one call (attention_inputs.h): against the
// CPU reference, and bit for bit against the three separate CUDA ops. The rows belong to several
// sequences (positions restart per sequence; slots are anywhere in the cache, some rows are not
// written); q is the query half of a q|gate view, k and v are views of one k|v buffer; rotary 36
// (not a multiple of 8) takes the separate ops inside the call.
TEST(CudaConformance, AttentionInputs) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(13);
  for (int64_t n : kTokenCounts) {
    for (int rotary : {64, 36}) {
      const int64_t hq = 5, hkv = 3, d = 256, block_size = 16, n_blocks = 20;
      std::vector<int32_t> pos(n);
      for (int64_t t = 0, next = rng.index(900); t < n; ++t, ++next) {
        if (rng.index(8) == 0) next = rng.index(900);  // the next sequence's rows
        pos[t] = static_cast<int32_t>(next);
      }
      const std::vector<int32_t> slots = random_slots(n, n_blocks * block_size, rng);
      Mirror qg = random_mirror({n, hq, 2 * d}, rng);
      Mirror kv = random_mirror({n, 2, hkv, d}, rng);
      Mirror qw = random_mirror({d}, rng, DType::kF32, 0.05f, 0.5f);
      Mirror kw = random_mirror({d}, rng, DType::kBF16, 0.05f, 0.5f);
      Mirror kc = random_mirror({n_blocks, block_size, hkv, d}, rng);
      Mirror vc = random_mirror({n_blocks, block_size, hkv, d}, rng);
      Tensor ref_qg = qg.host.to(Device::kCpu), ref_kv = kv.host.to(Device::kCpu);
      Tensor ref_kc = kc.host.to(Device::kCpu), ref_vc = vc.host.to(Device::kCpu);
      attention_inputs_ref(
          {.q = ref_qg.slice(2, 0, d),
           .q_norm = qw.host,
           .k_norm = kw.host,
           .eps = 1e-6f,
           .rope_dim = rotary,
           .rope_theta = 1e7f,
           .positions = host_i32(pos),
           .kv = {ref_kv.select(1, 0), ref_kv.select(1, 1), host_i32(slots), ref_kc, ref_vc}},
          ref_ctx());
      // The separate ops, on copies of the same device inputs.
      Tensor sep_qg = qg.dev.to(Device::kCuda), sep_kv = kv.dev.to(Device::kCuda);
      Tensor sep_kc = kc.dev.to(Device::kCuda), sep_vc = vc.dev.to(Device::kCuda);
      const Tensor positions = device_i32(pos), dev_slots = device_i32(slots);
      attention_inputs_cuda(
          {.q = qg.dev.slice(2, 0, d),
           .q_norm = qw.dev,
           .k_norm = kw.dev,
           .eps = 1e-6f,
           .rope_dim = rotary,
           .rope_theta = 1e7f,
           .positions = positions,
           .kv = {kv.dev.select(1, 0), kv.dev.select(1, 1), dev_slots, kc.dev, vc.dev}},
          cs.ctx());
      const Tensor sep_q = sep_qg.slice(2, 0, d), sep_k = sep_kv.select(1, 0);
      rms_norm_cuda({sep_q, qw.dev, sep_q, Tensor(), 1e-6f, true, positions, rotary, 1e7f},
                    cs.ctx());
      rms_norm_cuda({sep_k, kw.dev, sep_k, Tensor(), 1e-6f, true, positions, rotary, 1e7f},
                    cs.ctx());
      kv_cache_write_cuda({sep_k, sep_kv.select(1, 1), dev_slots, sep_kc, sep_vc}, cs.ctx());
      cs.sync();
      const std::string p = fmt::format(
          "n_rows={},heads_q={},heads_kv={},head_dim={},rotary_dim={}", n, hq, hkv, d, rotary);
      check_case("attention_inputs", p + ",q", rel_l2(download(qg.dev), gather(ref_qg)),
                 DType::kBF16);
      check_case("attention_inputs", p + ",k", rel_l2(download(kv.dev), gather(ref_kv)),
                 DType::kBF16);
      check_case("attention_inputs", p + ",k_cache", rel_l2(download(kc.dev), gather(ref_kc)),
                 DType::kBF16);
      check_case("attention_inputs", p + ",v_cache", rel_l2(download(vc.dev), gather(ref_vc)),
                 DType::kBF16);
      const auto same = [](const Tensor& a, const Tensor& b) {
        return download_bits<uint16_t>(a) == download_bits<uint16_t>(b);
      };
      check_bits("attention_inputs.fused", p,
                 same(qg.dev, sep_qg) && same(kv.dev, sep_kv) && same(kc.dev, sep_kc) &&
                     same(vc.dev, sep_vc));
    }
  }
}

}  // namespace
}  // namespace tandem::test
