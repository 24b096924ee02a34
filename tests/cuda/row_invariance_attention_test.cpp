// Bitwise row invariance of the CUDA attention kernels (DESIGN.md invariant 2), per family: a
// sequence's rows give the same bits alone and in any batch (1..256 sequences, any order, any
// row offset, a loose max_rows, a wider block table, short and long neighbours), verify rows equal
// decode rows at the same position (also across the tile/ring switch at 4096 positions), and the
// last rows of a prefill chunk equal a shorter chunk ending at the same position.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <utility>

#include "core/cuda_graph.h"
#include "cuda_test_util.h"
#include "kernels/attention/attention.h"

namespace tandem::test {
namespace {

using namespace tandem::kernels;

// A sequence of the test world: its rows' q|gate (bf16 [rows, hq, 2 d], on the device), its
// positions after the step and its pages.
struct Seq {
  int64_t rows = 0, kv = 0;
  std::vector<int32_t> table;  // ceil(kv / block_size) block ids
  Tensor qg;
};

// Heads, a shared KV pool and the sequences that calls are made of.
struct World {
  int64_t hq, hkv, d, bs, n_blocks;
  Tensor kc, vc;
  std::vector<Seq> seqs;
  uint64_t seed = 1;

  World(int64_t hq_, int64_t hkv_, int64_t d_, int64_t bs_, int64_t n_blocks_)
      : hq(hq_), hkv(hkv_), d(d_), bs(bs_), n_blocks(n_blocks_) {
    kc = Tensor::zeros({n_blocks, bs, hkv, d}, DType::kBF16, Device::kCuda);
    vc = Tensor::zeros({n_blocks, bs, hkv, d}, DType::kBF16, Device::kCuda);
    fill_uniform(kc, seed++, -3.f, 3.f);
    fill_uniform(vc, seed++, -1.f, 1.f);
  }
  // A sequence of `rows` rows and `kv` positions on random distinct pages; returns its index.
  int add(int64_t rows, int64_t kv, Rng& rng) {
    Seq s;
    s.rows = rows;
    s.kv = kv;
    s.table = random_block_tables({kv}, (kv + bs - 1) / bs, n_blocks, bs, rng);
    s.qg = Tensor::zeros({std::max<int64_t>(rows, 1), hq, 2 * d}, DType::kBF16, Device::kCuda);
    fill_uniform(s.qg, seed++, -3.f, 3.f);
    seqs.push_back(std::move(s));
    return static_cast<int>(seqs.size()) - 1;
  }
  // The same pages and positions as sequence `of`, with the given rows of q|gate.
  int add_view(int of, int64_t rows, int64_t kv, Tensor qg) {
    Seq s = seqs[static_cast<size_t>(of)];
    s.rows = rows;
    s.kv = kv;
    s.qg = std::move(qg);
    seqs.push_back(std::move(s));
    return static_cast<int>(seqs.size()) - 1;
  }
};

// A call's layout: which sequences, in which order, where its rows start, and the host bounds.
struct Layout {
  std::vector<int> members;
  int64_t first_row = 0;
  int64_t max_rows = 0;  // 0: the members' largest
  int64_t width = 0;     // block-table width; 0: the members' longest + 1
  std::string name;
};

struct CallOut {
  std::vector<int32_t> rs;
  std::vector<uint16_t> bits;  // the whole output tensor
};

// Copies rows [0, n) of the contiguous device tensor src to rows [at, at + n) of dst.
void copy_rows(const Tensor& dst, int64_t at, const Tensor& src, int64_t n) {
  const size_t row = static_cast<size_t>(src.stride(0) * dtype_size(src.dtype()));
  device_copy(static_cast<char*>(dst.raw()) + at * row, Device::kCuda, src.raw(), Device::kCuda,
              n * row);
}

CallOut run_call(World& w, const Layout& l, bool prefill, const CudaStream& cs) {
  CallOut c;
  std::vector<int64_t> rows, kv;
  int64_t max_rows = l.max_rows, width = l.width;
  for (int m : l.members) {
    const Seq& s = w.seqs[static_cast<size_t>(m)];
    rows.push_back(s.rows);
    kv.push_back(s.kv);
    max_rows = l.max_rows > 0 ? max_rows : std::max(max_rows, s.rows);
    width =
        l.width > 0 ? width : std::max<int64_t>(width, static_cast<int64_t>(s.table.size()) + 1);
  }
  c.rs = row_starts(rows, l.first_row);
  const int64_t n_seqs = static_cast<int64_t>(l.members.size()), n_rows = c.rs.back() + 3;
  Tensor qg = Tensor::zeros({n_rows, w.hq, 2 * w.d}, DType::kBF16, Device::kCuda);
  fill_uniform(qg, w.seed++, -3.f, 3.f);  // rows outside the call hold other values
  std::vector<int32_t> tables(static_cast<size_t>(n_seqs * width), -1);
  for (int64_t i = 0; i < n_seqs; ++i) {
    const Seq& s = w.seqs[static_cast<size_t>(l.members[i])];
    if (s.rows > 0) copy_rows(qg, c.rs[i], s.qg, s.rows);
    std::copy(s.table.begin(), s.table.end(), tables.begin() + i * width);
  }
  std::vector<int32_t> kv32(kv.begin(), kv.end());
  Tensor out = poisoned({n_rows, w.hq, w.d}, DType::kBF16);
  const int64_t ws_rows = std::min(n_rows, n_seqs * max_rows);
  Tensor ws = prefill ? Tensor()
                      : poisoned({std::max<int64_t>(1, attention_workspace_floats(
                                                           ws_rows, w.hq, w.d, width * w.bs))},
                                 DType::kF32);
  attention_cuda({.q = qg.slice(2, 0, w.d),
                  .gate = qg.slice(2, w.d, 2 * w.d),
                  .k_cache = w.kc,
                  .v_cache = w.vc,
                  .block_tables = host_i32_2d(tables, n_seqs, width).to(Device::kCuda),
                  .kv_len = device_i32(kv32),
                  .out = out,
                  .seqs = {n_seqs, max_rows, device_i32(c.rs)},
                  .prefill = prefill,
                  .workspace = ws},
                 cs.ctx());
  cs.sync();
  c.bits = download_bits<uint16_t>(out);
  return c;
}

// Every member of every layout gives the bits it gives alone (one sequence, rows at 0, its own
// max_rows and table width).
void check_layouts(World& w, const std::vector<Layout>& layouts, bool prefill,
                   const std::string& op, const CudaStream& cs) {
  std::map<int, CallOut> alone;
  const int64_t row = w.hq * w.d;
  for (const Layout& l : layouts) {
    const CallOut c = run_call(w, l, prefill, cs);
    std::string bad;
    for (size_t i = 0; i < l.members.size(); ++i) {
      const int m = l.members[i];
      const Seq& s = w.seqs[static_cast<size_t>(m)];
      if (s.rows == 0) continue;
      if (!alone.count(m)) alone[m] = run_call(w, Layout{{m}}, prefill, cs);
      if (!rows_equal(c.bits, c.rs[i], alone[m].bits, 0, s.rows, row) && bad.empty())
        bad = fmt::format(",first_bad=seq {} (rows={},kv={}) at index {}", m, s.rows, s.kv, i);
    }
    check_bits(op,
               fmt::format("layout={},heads_q={},heads_kv={},head_dim={},n_seqs={},first_row={},"
                           "max_rows={},width={}{}",
                           l.name, w.hq, w.hkv, w.d, l.members.size(), l.first_row, l.max_rows,
                           l.width, bad),
               bad.empty());
  }
}

// Layouts of the world's sequences: all in order, reversed at a row offset, a shuffled subset with
// a loose max_rows and a wide table, and 256 sequences (the world repeated: the same sequence may
// sit in a call several times).
std::vector<Layout> standard_layouts(const World& w, int64_t loose_max_rows, Rng& rng) {
  std::vector<int> all(w.seqs.size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<Layout> ls;
  ls.push_back({all, 0, 0, 0, "in_order"});
  std::vector<int> rev(all.rbegin(), all.rend());
  ls.push_back({rev, 7, 0, 0, "reversed_offset"});
  std::vector<int> sub = all;
  std::shuffle(sub.begin(), sub.end(), rng.gen());
  sub.resize(sub.size() / 2 + 1);
  int64_t widest = 0;
  for (const Seq& s : w.seqs) widest = std::max<int64_t>(widest, s.table.size());
  ls.push_back({sub, 3, loose_max_rows, widest + 700, "subset_loose_bounds"});
  std::vector<int> big;
  while (big.size() < 256)
    big.push_back(all[static_cast<size_t>(rng.index(static_cast<int32_t>(all.size())))]);
  ls.push_back({big, 1, 0, 0, "256_seqs"});
  return ls;
}

// Decode family: sequences of 1..16 rows at contexts on both sides of the split granule and of the
// tile/ring switch, alone and in batches.
TEST(CudaRowInvariance, AttentionDecodeBatch) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(31);
  struct Shape {
    int64_t hq, hkv, d;
  };
  for (const Shape sh : {Shape{24, 4, 256}, Shape{6, 2, 128}, Shape{8, 1, 64}}) {
    World w(sh.hq, sh.hkv, sh.d, 16, 2400);
    const int64_t kvs[] = {1,    16,   37,   511,  512,  513,  1030,
                           4090, 4096, 4097, 4100, 5000, 9000, 20000};
    for (const int64_t kv : kvs) {
      const int64_t rows = 1 + rng.index(static_cast<int32_t>(std::min<int64_t>(16, kv)));
      w.add(rows, kv, rng);
      w.add(1, kv, rng);
    }
    w.add(0, 300, rng);  // a sequence without rows
    check_layouts(w, standard_layouts(w, 16, rng), false, "attention.decode.batch", cs);
  }
}

// Verify rows j of a T-row step at kv_len L equal decode steps (one row) at kv_len L - T + 1 + j,
// as sequences of one batch and each alone. kv_len 4100 with T = 9: the verify and the later
// decodes take the ring kernel, the earlier decodes the tile kernel.
TEST(CudaRowInvariance, AttentionVerifyEqualsDecode) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(23);
  struct Case {
    int64_t hq, hkv, d, kv_len, rows;
  };
  for (const Case c :
       {Case{24, 4, 256, 37, 9}, Case{24, 4, 256, 1030, 9}, Case{24, 4, 256, 4100, 9},
        Case{6, 2, 128, 5000, 16}, Case{8, 1, 64, 520, 9}, Case{8, 1, 128, 4104, 16}}) {
    World w(c.hq, c.hkv, c.d, 16, (c.kv_len + 15) / 16 + 80);  // + the neighbour's 44 pages
    const int verify = w.add(c.rows, c.kv_len, rng);
    Layout batch{{verify}, 2, 16, 0, "verify_and_decodes"};
    for (int64_t j = 0; j < c.rows; ++j) {
      Tensor one = Tensor::zeros({1, c.hq, 2 * c.d}, DType::kBF16, Device::kCuda);
      copy_rows(one, 0, w.seqs[static_cast<size_t>(verify)].qg.slice(0, j, j + 1), 1);
      batch.members.push_back(w.add_view(verify, 1, c.kv_len - c.rows + 1 + j, one));
    }
    w.add(3, 700, rng);  // a neighbour
    batch.members.push_back(static_cast<int>(w.seqs.size()) - 1);
    const CallOut together = run_call(w, batch, false, cs);
    const CallOut v_alone = run_call(w, Layout{{verify}}, false, cs);
    const int64_t row = c.hq * c.d;
    for (int64_t j = 0; j < c.rows; ++j) {
      const int m = batch.members[static_cast<size_t>(j + 1)];
      const CallOut d_alone = run_call(w, Layout{{m}}, false, cs);
      const std::string p =
          fmt::format("rows={},row={},heads_q={},heads_kv={},head_dim={},kv_len={}", c.rows, j,
                      c.hq, c.hkv, c.d, c.kv_len);
      check_bits("attention.verify_rows", p + ",alone",
                 rows_equal(v_alone.bits, j, d_alone.bits, 0, 1, row));
      check_bits(
          "attention.verify_rows", p + ",one_batch",
          rows_equal(together.bits, together.rs[0] + j, together.bits, together.rs[j + 1], 1, row));
    }
  }
}

// Prefill family: chunks of 1..300 rows with ragged prior contexts, alone and in batches; and the
// last m rows of a chunk equal an m-row chunk ending at the same position.
TEST(CudaRowInvariance, AttentionPrefillBatch) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(25);
  struct Shape {
    int64_t hq, hkv, d;
  };
  for (const Shape sh : {Shape{24, 4, 256}, Shape{6, 2, 128}, Shape{8, 1, 64}}) {
    World w(sh.hq, sh.hkv, sh.d, 16, 700);
    for (const int64_t rows : {1, 5, 17, 64, 111, 300}) {
      for (const int64_t prior : {0, 830}) w.add(rows, rows + prior, rng);
    }
    w.add(0, 50, rng);
    check_layouts(w, standard_layouts(w, 400, rng), true, "attention.prefill.batch", cs);
  }
  for (const Shape sh : {Shape{24, 4, 256}, Shape{6, 2, 128}, Shape{8, 1, 64}}) {
    World w(sh.hq, sh.hkv, sh.d, 16, 200);
    const int64_t n = 111, m = kAttentionMaxDecodeTokens + 1, kv = 830;
    const int full = w.add(n, kv, rng);
    const int tail =
        w.add_view(full, m, kv, w.seqs[static_cast<size_t>(full)].qg.slice(0, n - m, n));
    const CallOut a = run_call(w, Layout{{full}}, true, cs);
    const CallOut b = run_call(w, Layout{{tail}}, true, cs);
    for (int64_t j = 0; j < m; ++j) {
      check_bits("attention.prefill.tail_rows",
                 fmt::format("rows={},row={},heads_q={},heads_kv={},head_dim={},kv_len={}", m, j,
                             sh.hq, sh.hkv, sh.d, kv),
                 rows_equal(a.bits, n - m + j, b.bits, j, 1, sh.hq * sh.d));
    }
  }
}

}  // namespace
}  // namespace tandem::test
