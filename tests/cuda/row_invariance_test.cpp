// Row invariance on the GPU (DESIGN.md inv. 2, 3): a token row computed inside a launch of 9 (or
// 16) rows must be bit-identical to the same row computed alone, wherever it sits; GDN state
// columns and the conv history after a verify must equal a token-by-token run bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <utility>

#include "cuda_test_util.h"
#include "kernels/attention/attention.h"
#include "kernels/conv1d/conv1d.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/linear/linear.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"

namespace tandem::test {
namespace {

using namespace tandem::kernels;

template <typename Bits>
bool same_bits(const Tensor& a, const Tensor& b) {
  return download_bits<Bits>(a) == download_bits<Bits>(b);
}

// A contiguous copy of row j (dim 0) of a device tensor.
Tensor row_copy(const Tensor& dev, int64_t j) {
  Shape s = dev.shape();
  s[0] = 1;
  Tensor r = Tensor::zeros(s, dev.dtype(), Device::kCuda);
  device_copy(r.raw(), Device::kCuda,
              static_cast<const char*>(dev.raw()) + j * dev.stride(0) * dtype_size(dev.dtype()),
              Device::kCuda, static_cast<size_t>(r.nbytes()));
  return r;
}

TEST(CudaRowInvariance, Linear) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(21);
  // 4104 -> 100 runs the decode kernel with a k-split of 8 uneven ranges. A single row runs the
  // 5-slot ring of calls up to 4 tokens, n = 6 the 4-slot one, n = 9 and 16 two B tiles.
  for (const auto& [in, out_f] :
       {std::pair<int64_t, int64_t>{1003, 1000}, {5120, 1000}, {4104, 100}}) {
    Mirror w = random_mirror({out_f, in}, rng, DType::kBF16, 0.01f, 0.1f);
    for (int64_t n : {2, 6, 9, 16}) {
      for (DType dt : {DType::kBF16, DType::kF32}) {
        Mirror x = random_mirror({n, in}, rng);
        Tensor out = poisoned({n, out_f}, dt);
        linear_cuda({x.dev, w.dev, out}, cs.ctx());
        for (int64_t j : {int64_t{0}, n / 2, n - 1}) {
          Tensor one = poisoned({1, out_f}, dt);
          linear_cuda({row_copy(x.dev, j), w.dev, one}, cs.ctx());
          cs.sync();
          const std::string p = fmt::format("n_tokens={},row={},in={},out={},out_dtype={}", n, j,
                                            in, out_f, dtype_name(dt));
          check_bits("linear.rows", p,
                     dt == DType::kF32 ? same_bits<uint32_t>(row_copy(out, j), one)
                                       : same_bits<uint16_t>(row_copy(out, j), one));
        }
      }
    }
  }
}

// The swiglu epilogue of the decode linear (LinearEpilogue::kSwiGluPairs) is elementwise on the
// same sums, so its rows are as invariant as the plain linear's.
TEST(CudaRowInvariance, LinearSwiglu) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(27);
  const int64_t in = 5120, inter = 1000;
  Mirror w = random_mirror({2 * inter, in}, rng, DType::kBF16, 0.01f, 0.1f);
  for (int64_t n : {2, 9, 16}) {
    Mirror x = random_mirror({n, in}, rng);
    Tensor out = poisoned({n, inter}, DType::kBF16);
    linear_cuda(
        {x.dev, w.dev, out, LinearEpilogue::kSwiGluPairs, poisoned({n, 2 * inter}, DType::kBF16)},
        cs.ctx());
    for (int64_t j : {int64_t{0}, n / 2, n - 1}) {
      Tensor one = poisoned({1, inter}, DType::kBF16);
      linear_cuda({row_copy(x.dev, j), w.dev, one, LinearEpilogue::kSwiGluPairs,
                   poisoned({1, 2 * inter}, DType::kBF16)},
                  cs.ctx());
      cs.sync();
      check_bits("linear.swiglu_rows",
                 fmt::format("n_tokens={},row={},in={},inter={}", n, j, in, inter),
                 same_bits<uint16_t>(row_copy(out, j), one));
    }
  }
}

// input_rms scales a token's sums by that token's own inverse RMS, and kAddToOut adds into that
// token's own row, so both keep the decode linear's rows invariant.
TEST(CudaRowInvariance, LinearInputRmsAndAdd) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(29);
  for (const auto& [in, out_f] : {std::pair<int64_t, int64_t>{5120, 1000}, {4104, 100}}) {
    Mirror w = random_mirror({out_f, in}, rng, DType::kBF16, 0.01f, 0.1f);
    const auto scaled = [&](const Tensor& x, const Tensor& out) {
      linear_cuda({.x = x,
                   .weight = w.dev,
                   .out = out,
                   .input_rms = true,
                   .input_scratch = poisoned(x.shape(), DType::kBF16)},
                  cs.ctx());
    };
    const auto added = [&](const Tensor& x, const Tensor& out) {
      linear_cuda({.x = x,
                   .weight = w.dev,
                   .out = out,
                   .epilogue = LinearEpilogue::kAddToOut,
                   .scratch = poisoned({x.dim(0), out_f}, DType::kBF16)},
                  cs.ctx());
    };
    for (int64_t n : {2, 9, 16}) {
      Mirror x = random_mirror({n, in}, rng, DType::kBF16, -2.f, 2.f);
      Mirror res = random_mirror({n, out_f}, rng, DType::kBF16, -4.f, 4.f);
      Tensor out = poisoned({n, out_f}, DType::kBF16), sum = res.dev.to(Device::kCuda);
      scaled(x.dev, out);
      added(x.dev, sum);
      for (int64_t j : {int64_t{0}, n / 2, n - 1}) {
        Tensor one = poisoned({1, out_f}, DType::kBF16), one_sum = row_copy(res.dev, j);
        scaled(row_copy(x.dev, j), one);
        added(row_copy(x.dev, j), one_sum);
        cs.sync();
        const std::string p = fmt::format("n_tokens={},row={},in={},out={}", n, j, in, out_f);
        check_bits("linear.input_rms_rows", p, same_bits<uint16_t>(row_copy(out, j), one));
        check_bits("linear.add_rows", p, same_bits<uint16_t>(row_copy(sum, j), one_sum));
      }
    }
  }
}

TEST(CudaRowInvariance, RmsNorm) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(22);
  const int64_t n = 9, dim = 5120;
  Mirror x = random_mirror({n, dim}, rng);
  Mirror w = random_mirror({dim}, rng);
  Tensor out = poisoned({n, dim}, DType::kBF16);
  rms_norm_cuda({x.dev, w.dev, out, Tensor(), 1e-6f, true}, cs.ctx());
  for (int64_t j : {0, 4, 8}) {
    Tensor one = poisoned({1, dim}, DType::kBF16);
    rms_norm_cuda({row_copy(x.dev, j), w.dev, one, Tensor(), 1e-6f, true}, cs.ctx());
    cs.sync();
    check_bits("rms_norm.rows", fmt::format("n_tokens={},row={},dim={}", n, j, dim),
               same_bits<uint16_t>(row_copy(out, j), one));
  }
}

// RMSNorm with RoPE in one launch equals RMSNorm then rope() (two launches) bit for bit, and a
// row of a 9-row call equals the row alone.
TEST(CudaRowInvariance, RmsNormRope) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(26);
  const int64_t n = 9, heads = 4, d = 256;
  for (int rotary : {64, 256}) {
    Mirror x = random_mirror({n, heads, d}, rng);
    Mirror w = random_mirror({d}, rng);
    std::vector<int32_t> pos(n);
    for (auto& p : pos) p = rng.index(40000);
    const Tensor positions = device_i32(pos);
    Tensor fused = poisoned({n, heads, d}, DType::kBF16);
    rms_norm_cuda({x.dev, w.dev, fused, Tensor(), 1e-6f, true, positions, rotary, 1e7f}, cs.ctx());
    Tensor twice = poisoned({n, heads, d}, DType::kBF16);
    rms_norm_cuda({x.dev, w.dev, twice, Tensor(), 1e-6f, true}, cs.ctx());
    rope_cuda({twice, positions, rotary, 1e7f}, cs.ctx());
    cs.sync();
    check_bits("rms_norm.rope_fused",
               fmt::format("n_tokens={},heads={},rotary_dim={}", n, heads, rotary),
               same_bits<uint16_t>(fused, twice));
    for (int64_t j : {0, 4, 8}) {
      Tensor one = poisoned({1, heads, d}, DType::kBF16);
      rms_norm_cuda({row_copy(x.dev, j), w.dev, one, Tensor(), 1e-6f, true,
                     device_i32({pos[static_cast<size_t>(j)]}), rotary, 1e7f},
                    cs.ctx());
      cs.sync();
      check_bits("rms_norm.rope_rows",
                 fmt::format("n_tokens={},row={},rotary_dim={}", n, j, rotary),
                 same_bits<uint16_t>(row_copy(fused, j), one));
    }
  }
}

// Random paged-attention inputs for n query rows: q and K over a wider range (so that softmax is
// not flat), gate, V, and n_blocks cache blocks of bs positions behind a shuffled table.
struct PagedInputs {
  Mirror q, g, kc, vc;
  Tensor table;
};
PagedInputs random_paged_inputs(int64_t n, int64_t hq, int64_t hkv, int64_t d, int64_t n_blocks,
                                int64_t bs, Rng& rng) {
  PagedInputs in;
  in.table = device_i32(shuffled_block_table(n_blocks, rng));
  in.q = random_mirror({n, hq, d}, rng, DType::kBF16, 0.05f, 3.f);
  in.g = random_mirror({n, hq, d}, rng);
  in.kc = random_mirror({n_blocks, bs, hkv, d}, rng, DType::kBF16, 0.05f, 3.f);
  in.vc = random_mirror({n_blocks, bs, hkv, d}, rng);
  return in;
}

// Verify rows j of a 9-row step at kv_len L equal decode steps at kv_len L - 8 + j.
TEST(CudaRowInvariance, Attention) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(23);
  struct Case {
    int64_t hq, hkv, d, kv_len;
  };
  // kv_len 4100: the verify and the later decodes take the ring kernel, the earlier decodes the
  // tile kernel (switch above 4096 positions), so the two decode kernels are checked bitwise too.
  for (const Case c : {Case{24, 4, 256, 37}, Case{24, 4, 256, 1030}, Case{24, 4, 256, 4100},
                       Case{6, 2, 128, 5000}, Case{8, 1, 64, 520}}) {
    const int64_t n = 9, bs = 16, n_blocks = (c.kv_len + bs - 1) / bs + 1;
    const PagedInputs in = random_paged_inputs(n, c.hq, c.hkv, c.d, n_blocks, bs, rng);
    const Mirror &q = in.q, &g = in.g, &kc = in.kc, &vc = in.vc;
    const Tensor& tbl = in.table;
    Tensor out = poisoned({n, c.hq, c.d}, DType::kBF16);
    attention_cuda({q.dev, g.dev, kc.dev, vc.dev, tbl, device_i32({static_cast<int32_t>(c.kv_len)}),
                    out, 0.f, Tensor()},
                   cs.ctx());
    for (int64_t j = 0; j < n; ++j) {
      Tensor one = poisoned({1, c.hq, c.d}, DType::kBF16);
      const int32_t len = static_cast<int32_t>(c.kv_len - n + 1 + j);
      attention_cuda({row_copy(q.dev, j), row_copy(g.dev, j), kc.dev, vc.dev, tbl,
                      device_i32({len}), one, 0.f, Tensor()},
                     cs.ctx());
      cs.sync();
      check_bits("attention.rows",
                 fmt::format("n_tokens={},row={},heads_q={},heads_kv={},head_dim={},kv_len={}", n,
                             j, c.hq, c.hkv, c.d, c.kv_len),
                 same_bits<uint16_t>(row_copy(out, j), one));
    }
  }
}

// Prefill rows (n_tokens > kAttentionMaxDecodeTokens take their own kernel): the last 17 rows of a
// 111-row call equal a 17-row call at the same kv_len, bit for bit, wherever their row blocks sit.
TEST(CudaRowInvariance, AttentionPrefill) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(25);
  struct Case {
    int64_t hq, hkv, d, kv_len;
  };
  for (const Case c : {Case{24, 4, 256, 830}, Case{6, 2, 128, 111}, Case{8, 1, 64, 300}}) {
    const int64_t n = 111, m = kAttentionMaxDecodeTokens + 1, bs = 16;
    const int64_t n_blocks = (c.kv_len + bs - 1) / bs + 1;
    const PagedInputs in = random_paged_inputs(n, c.hq, c.hkv, c.d, n_blocks, bs, rng);
    const Mirror &q = in.q, &g = in.g, &kc = in.kc, &vc = in.vc;
    const Tensor& tbl = in.table;
    const Tensor len = device_i32({static_cast<int32_t>(c.kv_len)});
    Tensor out = poisoned({n, c.hq, c.d}, DType::kBF16),
           tail = poisoned({m, c.hq, c.d}, DType::kBF16);
    attention_cuda({q.dev, g.dev, kc.dev, vc.dev, tbl, len, out, 0.f, Tensor()}, cs.ctx());
    attention_cuda({q.dev.slice(0, n - m, n), g.dev.slice(0, n - m, n), kc.dev, vc.dev, tbl, len,
                    tail, 0.f, Tensor()},
                   cs.ctx());
    cs.sync();
    for (int64_t j = 0; j < m; ++j) {
      check_bits("attention.prefill_rows",
                 fmt::format("n_tokens={},row={},heads_q={},heads_kv={},head_dim={},kv_len={}", m,
                             j, c.hq, c.hkv, c.d, c.kv_len),
                 same_bits<uint16_t>(row_copy(out, n - m + j), row_copy(tail, j)));
    }
  }
}

// A 9-token verify from column c against 9 single-token steps (n_acc = c + 1, then 1, 1, ...).
TEST(CudaRowInvariance, GatedDeltaRuleColumns) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(24);
  const int64_t n = 9, hk = 2, hv = 6, dk = 128, dv = 128, n_cols = 9;
  for (int32_t col : {0, 4, 8}) {
    Mirror q = random_mirror({n, hk, dk}, rng), k = random_mirror({n, hk, dk}, rng);
    Mirror v = random_mirror({n, hv, dv}, rng), a = random_mirror({n, hv}, rng),
           b = random_mirror({n, hv}, rng);
    Mirror a_log = random_mirror({hv}, rng, DType::kF32),
           dt_bias = random_mirror({hv}, rng, DType::kF32);
    Mirror state = random_mirror({n_cols, hv, dk, dv}, rng, DType::kF32, 0.01f, 0.3f);
    Tensor verify_state = state.host.to(Device::kCuda), step_state = state.host.to(Device::kCuda);
    Tensor out = poisoned({n, hv, dv}, DType::kBF16);
    gated_delta_rule_cuda({q.dev, k.dev, v.dev, a.dev, b.dev, a_log.dev, dt_bias.dev, verify_state,
                           device_i32({col + 1}), out, GdrMode::kRecurrent, 0, 64},
                          cs.ctx());
    const int64_t col_elems = hv * dk * dv;
    for (int64_t t = 0; t < n; ++t) {
      Tensor one = poisoned({1, hv, dv}, DType::kBF16);
      gated_delta_rule_cuda(
          {row_copy(q.dev, t), row_copy(k.dev, t), row_copy(v.dev, t), row_copy(a.dev, t),
           row_copy(b.dev, t), a_log.dev, dt_bias.dev, step_state,
           device_i32({t == 0 ? col + 1 : 1}), one, GdrMode::kRecurrent, 0, 64},
          cs.ctx());
      cs.sync();
      const std::string p =
          fmt::format("n_tokens={},token={},start_column={},heads_v={},d_k={}", n, t, col, hv, dk);
      check_bits("gated_delta_rule.rows", p, same_bits<uint16_t>(row_copy(out, t), one));
      const auto verify_bits = download_bits<uint32_t>(verify_state);
      const auto step_bits = download_bits<uint32_t>(step_state);
      check_bits("gated_delta_rule.columns", p,
                 std::equal(step_bits.begin(), step_bits.begin() + col_elems,
                            verify_bits.begin() + t * col_elems));
    }
  }
}

// A verify of T tokens against T single-token steps: outputs, and the window each n_acc would read.
TEST(CudaRowInvariance, Conv1dHistory) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(25);
  const int64_t channels = 1000, kernel = 4, k_max = 8, hist_len = kernel - 1 + k_max, n = 9;
  for (int32_t n_acc : {1, 5, 9}) {
    Mirror x = random_mirror({n, channels}, rng), w = random_mirror({channels, 1, kernel}, rng);
    Mirror hist = random_mirror({channels, hist_len}, rng);
    Tensor verify_hist = hist.host.to(Device::kCpu);
    Mirror vh = mirror(verify_hist, DType::kBF16), sh = mirror(verify_hist, DType::kBF16);
    Tensor out = poisoned({n, channels}, DType::kBF16);
    conv1d_cuda({x.dev, w.dev, vh.dev, device_i32({n_acc}), out, ConvHistoryMode::kSpec}, cs.ctx());
    cs.sync();
    const Tensor vh_host = vh.dev.to(Device::kCpu);
    for (int64_t t = 0; t < n; ++t) {
      Tensor one = poisoned({1, channels}, DType::kBF16);
      conv1d_cuda({row_copy(x.dev, t), w.dev, sh.dev, device_i32({t == 0 ? n_acc : 1}), one,
                   ConvHistoryMode::kSpec},
                  cs.ctx());
      cs.sync();
      const std::string p =
          fmt::format("n_tokens={},token={},n_acc={},channels={}", n, t, n_acc, channels);
      check_bits("conv1d.rows", p, same_bits<uint16_t>(row_copy(out, t), one));
      const Tensor sh_host = sh.dev.to(Device::kCpu);
      bool equal = true;  // window after accepting tokens 0..t: verify history[t : t + K - 1]
      for (int64_t c = 0; c < channels; ++c) {
        for (int64_t j = 0; j < kernel - 1; ++j) {
          equal &= vh_host.data<bf16>()[c * hist_len + t + j].bits ==
                   sh_host.data<bf16>()[c * hist_len + j].bits;
        }
      }
      check_bits("conv1d.history_window", p, equal);
    }
  }
}

}  // namespace
}  // namespace tandem::test
