// Conformance of the CUDA ops that carry sequence state: paged attention (decode, verify with
// q_len 1..9, prefill; contexts up to 40K), conv1d with its speculative history (kSpec, kCompact)
// and the gated delta rule (recurrent columns, chunked prefill). Outputs and state are compared.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/attention/attention.h"
#include "kernels/conv1d/conv1d.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_rms_norm/gated_rms_norm.h"

namespace tandem::test {
namespace {

using namespace tandem::kernels;

struct AttnCase {
  int64_t n, hq, hkv, d, kv_len, block_size;
  bool gated, workspace;
  std::string str() const {
    return fmt::format(
        "n_tokens={},heads_q={},heads_kv={},head_dim={},kv_len={},block_size={},gated={},workspace="
        "{}",
        n, hq, hkv, d, kv_len, block_size, gated, workspace);
  }
};

void run_attention(const AttnCase& c, Rng& rng, const CudaStream& cs) {
  const int64_t n_blocks = (c.kv_len + c.block_size - 1) / c.block_size + 2;
  const std::vector<int32_t> table = shuffled_block_table(n_blocks, rng);
  Mirror qg = random_mirror({c.n, c.hq, 2 * c.d}, rng, DType::kBF16, 0.05f, 3.f);  // q | gate
  Mirror kc = random_mirror({n_blocks, c.block_size, c.hkv, c.d}, rng, DType::kBF16, 0.05f, 3.f);
  Mirror vc = random_mirror({n_blocks, c.block_size, c.hkv, c.d}, rng);
  const std::vector<int32_t> kv_len = {static_cast<int32_t>(c.kv_len)};
  const auto q_of = [&](const Tensor& t) { return t.slice(2, 0, c.d); };
  const auto g_of = [&](const Tensor& t) { return c.gated ? t.slice(2, c.d, 2 * c.d) : Tensor(); };
  Tensor ref_out = Tensor::zeros({c.n, c.hq, c.d}, DType::kF32);
  attention_ref({q_of(qg.host), g_of(qg.host), kc.host, vc.host, host_i32(table), host_i32(kv_len),
                 ref_out, 0.f, Tensor()},
                ref_ctx());
  Tensor out = poisoned({c.n, c.hq, c.d}, DType::kBF16);
  Tensor ws =
      c.workspace
          ? Tensor::zeros({attention_workspace_floats(c.n, c.hq, c.d, n_blocks * c.block_size)},
                          DType::kF32, Device::kCuda)
          : Tensor();
  attention_cuda({q_of(qg.dev), g_of(qg.dev), kc.dev, vc.dev, device_i32(table), device_i32(kv_len),
                  out, 0.f, ws},
                 cs.ctx());
  cs.sync();
  check_case("attention", c.str(), rel_l2(download(out), gather(ref_out)), DType::kBF16);
}

struct HeadShape {
  int64_t hq, hkv, d;
};

TEST(CudaConformance, AttentionDecodeVerify) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(11);
  const HeadShape shapes[] = {{24, 4, 256}, {6, 2, 128}, {7, 7, 64}, {8, 1, 128}};
  for (const HeadShape& h : shapes) {
    for (int64_t n = 1; n <= 9; ++n) {
      for (int64_t kv : {n, n + 36, int64_t{512}, int64_t{513}, int64_t{1500}, int64_t{4097}}) {
        const bool odd = (n + kv) % 2 == 1;
        run_attention({n, h.hq, h.hkv, h.d, kv, odd ? 16 : 64, !odd || n == 1, odd}, rng, cs);
      }
    }
  }
}

TEST(CudaConformance, AttentionPrefill) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(12);
  for (const HeadShape& h : {HeadShape{24, 4, 256}, HeadShape{6, 3, 128}}) {
    for (int64_t n : {16, 19, 65, 111}) {
      for (int64_t prior : {0, 700})
        run_attention({n, h.hq, h.hkv, h.d, n + prior, 16, true, prior == 0}, rng, cs);
    }
  }
}

TEST(CudaConformance, AttentionLongContext) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(13);
  for (int64_t kv : {16384, 40000}) {
    for (int64_t n : {1, 4, 9}) run_attention({n, 24, 4, 256, kv, 16, true, true}, rng, cs);
  }
}

void run_conv(int64_t n, int64_t channels, int64_t kernel, int32_t n_acc, ConvHistoryMode mode,
              DType w_dt, Rng& rng, const CudaStream& cs) {
  const int64_t k_max = 8, hist_len = kernel - 1 + k_max, pad = 16;
  Mirror x = random_mirror({n, channels + pad}, rng, DType::kBF16, 0.05f, 2.f);
  Mirror w = random_mirror({channels, 1, kernel}, rng, w_dt);
  Mirror hist = random_mirror({channels, hist_len}, rng, DType::kBF16, 0.05f, 2.f);
  Tensor ref_hist = hist.host.to(Device::kCpu);
  Tensor ref_out = Tensor::zeros({n, channels}, DType::kF32);
  conv1d_ref({x.host.slice(1, 0, channels), w.host, ref_hist, host_i32({n_acc}), ref_out, mode},
             ref_ctx());
  Tensor out = poisoned({n, channels}, DType::kBF16);
  conv1d_cuda({x.dev.slice(1, 0, channels), w.dev, hist.dev, device_i32({n_acc}), out, mode},
              cs.ctx());
  cs.sync();
  const std::string p = fmt::format(
      "n_tokens={},channels={},kernel={},n_acc={},mode={},weight={}", n, channels, kernel, n_acc,
      mode == ConvHistoryMode::kSpec ? "spec" : "compact", dtype_name(w_dt));
  check_case("conv1d", p, rel_l2(download(out), gather(ref_out)), DType::kBF16);
  check_case("conv1d.history", p, rel_l2(download(hist.dev), gather(ref_hist)), DType::kBF16);
}

TEST(CudaConformance, Conv1d) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(14);
  for (int64_t channels : {1, 100, 4100}) {
    for (int64_t kernel : {4, 3}) {
      for (int64_t n : {1, 2, 5, 9}) {
        const int32_t n_acc = 1 + rng.index(9);
        run_conv(n, channels, kernel, n_acc, ConvHistoryMode::kSpec,
                 channels == 100 ? DType::kF32 : DType::kBF16, rng, cs);
      }
      for (int64_t n : {1, 2, 19, 65, 111, 300}) {
        run_conv(n, channels, kernel, 1 + rng.index(9), ConvHistoryMode::kCompact, DType::kBF16,
                 rng, cs);
      }
    }
  }
}

struct GdrShape {
  int64_t hk, hv, dk, dv;
};

void run_gdr(const GdrShape& s, int64_t n, int32_t n_acc, GdrMode mode, int64_t start, Rng& rng,
             const CudaStream& cs) {
  const int64_t n_cols = 9;
  Mirror qk = random_mirror({n, s.hk, 2 * s.dk + 8}, rng);  // q | k | pad per key head
  Mirror v = random_mirror({n, s.hv, s.dv + 8}, rng);
  Mirror ab = random_mirror({n, 2 * s.hv}, rng, DType::kBF16, 0.05f, 2.f);
  Tensor a_log_h = Tensor::zeros({s.hv}, DType::kF32);
  for (int64_t h = 0; h < s.hv; ++h)
    a_log_h.data<float>()[h] = bf16_to_f32(f32_to_bf16(std::log(1.f + 15.f * (h + 0.5f) / s.hv)));
  Mirror a_log = mirror(a_log_h, DType::kF32);
  Mirror dt_bias = random_mirror({s.hv}, rng, DType::kBF16, 0.05f, 0.5f);
  Mirror state = random_mirror({n_cols, s.hv, s.dk, s.dv}, rng, DType::kF32, 0.01f, 0.3f);
  Tensor ref_state = state.host.to(Device::kCpu);
  Tensor ref_out = Tensor::zeros({n, s.hv, s.dv}, DType::kF32);
  const auto q_of = [&](const Tensor& t) { return t.slice(2, 0, s.dk); };
  const auto k_of = [&](const Tensor& t) { return t.slice(2, s.dk, 2 * s.dk); };
  const auto v_of = [&](const Tensor& t) { return t.slice(2, 0, s.dv); };
  const auto a_of = [&](const Tensor& t) { return t.slice(1, 0, s.hv); };
  const auto b_of = [&](const Tensor& t) { return t.slice(1, s.hv, 2 * s.hv); };
  gated_delta_rule_ref(
      {q_of(qk.host), k_of(qk.host), v_of(v.host), a_of(ab.host), b_of(ab.host), a_log.host,
       dt_bias.host, ref_state, host_i32({n_acc}), ref_out, mode, start, 64},
      ref_ctx());
  Tensor out = poisoned({n, s.hv, s.dv}, DType::kBF16);
  gated_delta_rule_cuda(
      {q_of(qk.dev), k_of(qk.dev), v_of(v.dev), a_of(ab.dev), b_of(ab.dev), a_log.dev, dt_bias.dev,
       state.dev, device_i32({n_acc}), out, mode, start, 64},
      cs.ctx());
  cs.sync();
  const std::string p = fmt::format(
      "n_tokens={},heads_k={},heads_v={},d_k={},d_v={},n_acc={},mode={},start={}", n, s.hk, s.hv,
      s.dk, s.dv, n_acc, mode == GdrMode::kRecurrent ? "recurrent" : "chunked", start);
  check_case("gated_delta_rule", p, rel_l2(download(out), gather(ref_out)), DType::kBF16);
  check_case("gated_delta_rule.state", p, rel_l2(download(state.dev), gather(ref_state)),
             DType::kF32);
}

TEST(CudaConformance, GatedDeltaRule) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(15);
  for (const GdrShape& s :
       {GdrShape{2, 6, 128, 128}, GdrShape{1, 3, 64, 96}, GdrShape{3, 3, 256, 64}}) {
    for (int64_t n : {1, 2, 5, 9}) run_gdr(s, n, 1 + rng.index(9), GdrMode::kRecurrent, 0, rng, cs);
    for (int64_t n : {1, 19, 65, 111}) {
      for (int64_t start : {0, 37})
        run_gdr(s, n, 1 + rng.index(9), GdrMode::kChunked, start, rng, cs);
    }
  }
  // Longer prompts through the chunked (WY) kernel: many full chunks after a chunk-aligned or
  // unaligned start, and the real model's shape.
  for (const GdrShape& s : {GdrShape{2, 6, 128, 128}, GdrShape{1, 3, 64, 96}}) {
    for (int64_t start : {64, 100})
      run_gdr(s, 300, 1 + rng.index(9), GdrMode::kChunked, start, rng, cs);
  }
  run_gdr(GdrShape{3, 3, 256, 64}, 300, 1 + rng.index(9), GdrMode::kChunked, 100, rng, cs);
  run_gdr(GdrShape{1, 2, 16, 32}, 111, 1 + rng.index(9), GdrMode::kChunked, 37, rng, cs);
  run_gdr(GdrShape{16, 48, 128, 128}, 1024, 1 + rng.index(9), GdrMode::kChunked, 0, rng, cs);
  run_gdr(GdrShape{16, 48, 128, 128}, 300, 1 + rng.index(9), GdrMode::kChunked, 100, rng, cs);
}

// The output norm done by the same call (GdrOutputNorm): fused into the recurrent kernel for
// d_v <= 128 (clusters of 1..4 blocks), the separate op otherwise. Against the reference, and
// bitwise against the rule and the separate gated_rms_norm launched one after the other.
void run_gdr_norm(const GdrShape& s, int64_t n, int32_t n_acc, GdrMode mode, Rng& rng,
                  const CudaStream& cs) {
  const int64_t n_cols = 9;
  Mirror qk = random_mirror({n, s.hk, 2 * s.dk}, rng);
  Mirror v = random_mirror({n, s.hv, s.dv}, rng);
  Mirror z = random_mirror({n, s.hv, s.dv + 8}, rng, DType::kBF16, 0.05f, 3.f);  // strided
  Mirror ab = random_mirror({n, 2 * s.hv}, rng, DType::kBF16, 0.05f, 2.f);
  Mirror a_log = random_mirror({s.hv}, rng, DType::kF32, 0.05f, 2.f);
  Mirror dt_bias = random_mirror({s.hv}, rng, DType::kBF16, 0.05f, 0.5f);
  Mirror w = random_mirror({s.dv}, rng, DType::kBF16, 0.5f, 1.5f);
  Mirror state = random_mirror({n_cols, s.hv, s.dk, s.dv}, rng, DType::kF32, 0.01f, 0.3f);
  Mirror state2 = mirror(state.host, DType::kF32);
  const auto q_of = [&](const Tensor& t) { return t.slice(2, 0, s.dk); };
  const auto k_of = [&](const Tensor& t) { return t.slice(2, s.dk, 2 * s.dk); };
  const auto z_of = [&](const Tensor& t) { return t.slice(2, 0, s.dv); };
  const auto a_of = [&](const Tensor& t) { return t.slice(1, 0, s.hv); };
  const auto b_of = [&](const Tensor& t) { return t.slice(1, s.hv, 2 * s.hv); };
  Tensor ref_state = state.host.to(Device::kCpu);
  Tensor ref_out = Tensor::zeros({n, s.hv, s.dv}, DType::kF32);
  Tensor ref_norm = Tensor::zeros({n, s.hv, s.dv}, DType::kF32);
  gated_delta_rule_ref({q_of(qk.host), k_of(qk.host), v.host, a_of(ab.host), b_of(ab.host),
                        a_log.host, dt_bias.host, ref_state, host_i32({n_acc}), ref_out, mode, 0,
                        64, GdrOutputNorm{z_of(z.host), w.host, ref_norm, 1e-6f}},
                       ref_ctx());
  Tensor out = poisoned({n, s.hv, s.dv}, DType::kBF16);
  Tensor normed = poisoned({n, s.hv, s.dv}, DType::kBF16);
  gated_delta_rule_cuda({q_of(qk.dev), k_of(qk.dev), v.dev, a_of(ab.dev), b_of(ab.dev), a_log.dev,
                         dt_bias.dev, state.dev, device_i32({n_acc}), out, mode, 0, 64,
                         GdrOutputNorm{z_of(z.dev), w.dev, normed, 1e-6f}},
                        cs.ctx());
  Tensor out2 = poisoned({n, s.hv, s.dv}, DType::kBF16);
  Tensor normed2 = poisoned({n, s.hv, s.dv}, DType::kBF16);
  gated_delta_rule_cuda({q_of(qk.dev), k_of(qk.dev), v.dev, a_of(ab.dev), b_of(ab.dev), a_log.dev,
                         dt_bias.dev, state2.dev, device_i32({n_acc}), out2, mode, 0, 64},
                        cs.ctx());
  gated_rms_norm_cuda({out2, z_of(z.dev), w.dev, normed2, 1e-6f}, cs.ctx());
  cs.sync();
  const std::string p =
      fmt::format("n_tokens={},heads_k={},heads_v={},d_k={},d_v={},n_acc={},mode={}", n, s.hk, s.hv,
                  s.dk, s.dv, n_acc, mode == GdrMode::kRecurrent ? "recurrent" : "chunked");
  check_case("gated_delta_rule.norm", p, rel_l2(download(normed), gather(ref_norm)), DType::kBF16);
  check_bits("gated_delta_rule.norm_fused", p,
             download(out) == download(out2) && download(normed) == download(normed2) &&
                 download(state.dev) == download(state2.dev));
}

TEST(CudaConformance, GatedDeltaRuleOutputNorm) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(16);
  // d_v 16 and 24: one block, part idle; 96: a cluster of 3; 128: the model; 256: not fused.
  for (const GdrShape& s :
       {GdrShape{2, 6, 128, 128}, GdrShape{1, 3, 64, 96}, GdrShape{1, 2, 16, 16},
        GdrShape{2, 4, 32, 24}, GdrShape{1, 2, 64, 256}, GdrShape{16, 48, 128, 128}}) {
    for (int64_t n : {1, 2, 4, 9})
      run_gdr_norm(s, n, 1 + rng.index(9), GdrMode::kRecurrent, rng, cs);
    run_gdr_norm(s, 19, 1 + rng.index(9), GdrMode::kChunked, rng, cs);
  }
}

}  // namespace
}  // namespace tandem::test
