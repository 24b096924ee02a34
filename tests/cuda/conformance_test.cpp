// Conformance of every elementwise/norm/GEMM CUDA op against its CPU reference on awkward shapes,
// strided views and random bf16-exact inputs (the reference sees exactly what the GPU sees).
// Attention, the KV write and attention_inputs: conformance_attention_test.cpp; conv1d and the
// gated delta rule: conformance_gdn_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/argmax/argmax.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gated_rms_norm/gated_rms_norm.h"
#include "kernels/linear/linear.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"

namespace tandem::test {
namespace {

using namespace tandem::kernels;

const std::vector<int64_t> kTokenCounts = {1, 2, 19, 65, 111};

Tensor cols(const Tensor& t, int64_t w) { return t.slice(-1, 0, w); }

TEST(CudaConformance, Embedding) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(1);
  for (DType table_dt : {DType::kBF16, DType::kF32}) {
    for (int64_t n : kTokenCounts) {
      const int64_t vocab = 1003, hidden = 328, pad = 24;
      Mirror table = random_mirror({vocab, hidden}, rng, table_dt);
      std::vector<int32_t> ids(n);
      for (auto& id : ids) id = rng.index(static_cast<int32_t>(vocab));
      Tensor ref_out = Tensor::zeros({n, hidden + pad}, DType::kF32);
      embedding_ref({host_i32(ids), table.host, cols(ref_out, hidden)}, ref_ctx());
      Tensor out = poisoned({n, hidden + pad}, DType::kBF16);
      embedding_cuda({device_i32(ids), table.dev, cols(out, hidden)}, cs.ctx());
      cs.sync();
      const auto view = [&](const Tensor& t) { return cols(t, hidden); };
      check_case("embedding", fmt::format("n_tokens={},table={}", n, dtype_name(table_dt)),
                 rel_l2(download(out, view), gather(view(ref_out))), DType::kBF16);
    }
  }
}

TEST(CudaConformance, RmsNorm) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(2);
  for (int64_t n : kTokenCounts) {
    for (int64_t dim : {128, 1000, 5120}) {
      for (bool fused : {false, true}) {
        for (bool zc : {true, false}) {
          Mirror x = random_mirror({n, dim}, rng);
          Mirror w = random_mirror({dim}, rng, DType::kBF16, 0.05f, 0.5f);
          Mirror res = random_mirror({n, dim}, rng);
          Tensor ref_res = res.host.to(Device::kCpu);
          Tensor ref_out = Tensor::zeros({n, dim}, DType::kF32);
          RmsNormArgs ra{x.host, w.host, ref_out, fused ? ref_res : Tensor(), 1e-6f, zc};
          rms_norm_ref(ra, ref_ctx());
          Tensor out = poisoned({n, dim}, DType::kBF16);
          rms_norm_cuda({x.dev, w.dev, out, fused ? res.dev : Tensor(), 1e-6f, zc}, cs.ctx());
          cs.sync();
          const std::string p =
              fmt::format("n_tokens={},dim={},fused={},zero_centred={}", n, dim, fused, zc);
          check_case("rms_norm", p, rel_l2(download(out), gather(ref_out)), DType::kBF16);
          if (fused) {
            check_case("rms_norm.residual", p, rel_l2(download(res.dev), gather(ref_res)),
                       DType::kBF16);
          }
        }
      }
    }
  }
  // Per-head q_norm over the query half of a [n, heads, 2 * head_dim] q|gate projection, in place.
  for (int64_t n : kTokenCounts) {
    const int64_t heads = 7, d = 256;
    Mirror qg = random_mirror({n, heads, 2 * d}, rng);
    Mirror w = random_mirror({d}, rng, DType::kF32, 0.05f, 0.5f);
    Tensor ref_qg = qg.host.to(Device::kCpu);
    const Tensor ref_q = ref_qg.slice(2, 0, d);
    rms_norm_ref({ref_q, w.host, ref_q, Tensor(), 1e-6f, true}, ref_ctx());
    const Tensor q = qg.dev.slice(2, 0, d);
    rms_norm_cuda({q, w.dev, q, Tensor(), 1e-6f, true}, cs.ctx());
    cs.sync();
    check_case("rms_norm",
               fmt::format("n_tokens={},heads={},head_dim={},strided,in_place", n, heads, d),
               rel_l2(download(qg.dev), gather(ref_qg)), DType::kBF16);
  }
}

TEST(CudaConformance, GatedRmsNorm) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(3);
  for (int64_t n : kTokenCounts) {
    for (DType o_dt : {DType::kBF16, DType::kF32}) {
      const int64_t heads = 7, dv = 128;
      Mirror o = random_mirror({n, heads, dv}, rng, o_dt);
      Mirror zbuf = random_mirror({n, heads, dv + 64}, rng);  // z is a strided view
      Mirror w = random_mirror({dv}, rng, DType::kBF16, 0.05f, 0.5f);
      Tensor ref_out = Tensor::zeros({n, heads, dv}, DType::kF32);
      gated_rms_norm_ref({o.host, zbuf.host.slice(2, 0, dv), w.host, ref_out, 1e-6f}, ref_ctx());
      Tensor out = poisoned({n, heads, dv}, DType::kBF16);
      gated_rms_norm_cuda({o.dev, zbuf.dev.slice(2, 0, dv), w.dev, out, 1e-6f}, cs.ctx());
      cs.sync();
      check_case("gated_rms_norm",
                 fmt::format("n_tokens={},heads={},d_v={},o={}", n, heads, dv, dtype_name(o_dt)),
                 rel_l2(download(out), gather(ref_out)), DType::kBF16);
    }
  }
}

TEST(CudaConformance, Linear) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(4);
  struct Shape3 {
    int64_t in, out;
  };
  const std::vector<int64_t> ns = {1, 2, 3, 4, 8, 9, 16, 17, 19, 65, 111, 300};
  for (const Shape3 s :
       {Shape3{64, 37}, Shape3{1003, 129}, Shape3{5120, 1000}, Shape3{2048, 2048},
        Shape3{4104, 100}}) {  // 4104 -> 100: a k-split of 8 uneven ranges (decode kernel)
    Mirror w = random_mirror({s.out, s.in}, rng, DType::kBF16, 0.01f, 0.1f);
    for (int64_t n : ns) {
      for (DType out_dt : {DType::kBF16, DType::kF32}) {
        const int64_t xpad = 8, opad = 3;
        Mirror x = random_mirror({n, s.in + xpad}, rng);  // x rows strided
        Tensor ref_out = Tensor::zeros({n, s.out + opad}, DType::kF32);
        linear_ref({cols(x.host, s.in), w.host, cols(ref_out, s.out)}, ref_ctx());
        Tensor out = poisoned({n, s.out + opad}, out_dt);
        linear_cuda({cols(x.dev, s.in), w.dev, cols(out, s.out)}, cs.ctx());
        cs.sync();
        const auto view = [&](const Tensor& t) { return cols(t, s.out); };
        check_case("linear",
                   fmt::format("n_tokens={},in={},out={},out_dtype={},path={}", n, s.in, s.out,
                               dtype_name(out_dt), n <= 16 ? "skinny" : "gemm"),
                   rel_l2(download(out, view), gather(view(ref_out))), out_dt);
      }
    }
  }
}

// Rows of gate and up [inter, in] (host f32) interleaved in groups of 8: the pair layout of
// LinearEpilogue::kSwiGluPairs, spelled out independently of the loader.
Tensor interleave_pairs(const Tensor& gate, const Tensor& up) {
  const int64_t inter = gate.dim(0), in = gate.dim(1);
  Tensor w = Tensor::zeros({2 * inter, in}, DType::kF32);
  for (int64_t f = 0; f < inter; ++f) {
    const int64_t row = 16 * (f / 8) + f % 8;
    w.slice(0, row, row + 1).copy_from(gate.slice(0, f, f + 1));
    w.slice(0, row + 8, row + 9).copy_from(up.slice(0, f, f + 1));
  }
  return w;
}

// The MLP's gate|up projection with the SwiGLU epilogue (LinearEpilogue::kSwiGluPairs): against
// the CPU reference of linear on gate_proj and up_proj then swiglu (linear.swiglu), and bitwise
// against the unfused GPU linear then swiglu over the pairs (linear.swiglu_fused). n_tokens <= 16
// with in % 8 == 0 is fused in the decode kernel; 19 takes the GEMM, in = 1003 the CUDA-core
// kernel, both through scratch.
TEST(CudaConformance, LinearSwiglu) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(13);
  struct Shape2 {
    int64_t in, inter;
  };
  for (const Shape2 s :
       {Shape2{64, 24}, Shape2{64, 200}, Shape2{5120, 136}, Shape2{5120, 2176}, Shape2{1003, 24}}) {
    const Tensor gate = host_random({s.inter, s.in}, rng, 0.01f, 0.1f);
    const Tensor up = host_random({s.inter, s.in}, rng, 0.01f, 0.1f);
    const Mirror w = mirror(interleave_pairs(gate, up), DType::kBF16);
    for (int64_t n : {1, 2, 3, 8, 9, 16, 19}) {
      const int64_t xpad = 8, opad = 3;
      Mirror x = random_mirror({n, s.in + xpad}, rng);  // x rows strided
      Tensor ref_g = Tensor::zeros({n, s.inter}, DType::kF32);
      Tensor ref_u = Tensor::zeros({n, s.inter}, DType::kF32);
      Tensor ref_out = Tensor::zeros({n, s.inter + opad}, DType::kF32);
      linear_ref({cols(x.host, s.in), gate, ref_g}, ref_ctx());
      linear_ref({cols(x.host, s.in), up, ref_u}, ref_ctx());
      swiglu_ref({ref_g, ref_u, cols(ref_out, s.inter)}, ref_ctx());
      Tensor out = poisoned({n, s.inter + opad}, DType::kBF16);  // out rows strided
      linear_cuda({cols(x.dev, s.in), w.dev, cols(out, s.inter), LinearEpilogue::kSwiGluPairs,
                   poisoned({n, 2 * s.inter}, DType::kBF16)},
                  cs.ctx());
      Tensor y = poisoned({n, 2 * s.inter}, DType::kBF16);
      Tensor unfused = poisoned({n, s.inter + opad}, DType::kBF16);
      linear_cuda({cols(x.dev, s.in), w.dev, y}, cs.ctx());
      swiglu_cuda({.out = cols(unfused, s.inter), .gate_up = y}, cs.ctx());
      cs.sync();
      const char* path = s.in % 8 != 0 ? "skinny+scratch" : n > 16 ? "gemm+scratch" : "fused";
      const std::string p =
          fmt::format("n_tokens={},in={},inter={},path={}", n, s.in, s.inter, path);
      const auto view = [&](const Tensor& t) { return cols(t, s.inter); };
      check_case("linear.swiglu", p, rel_l2(download(out, view), gather(view(ref_out))),
                 DType::kBF16);
      check_bits("linear.swiglu_fused", p,
                 download_bits<uint16_t>(out) == download_bits<uint16_t>(unfused));
    }
  }
}

// An RMSNorm folded into the weights (LinearArgs::input_rms) and the residual-stream write
// (LinearEpilogue::kAddToOut), the two halves of the CUDA forward's fused norms: against the CPU
// reference (linear.input_rms, linear.input_rms_swiglu, linear.add), and kAddToOut bitwise against
// the unfused GPU linear then rms_norm's residual add (linear.add_fused). n_tokens <= 16 with
// in % 8 == 0 is fused in the decode kernel; 19 takes the GEMM, in = 1003 the CUDA-core kernel.
TEST(CudaConformance, LinearInputRmsAndAdd) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(17);
  constexpr float kEps = 1e-6f;
  for (const auto& [in, out_f] : {std::pair<int64_t, int64_t>{64, 37},
                                  {1003, 129},
                                  {5120, 1000},
                                  {4104, 100},
                                  {5120, 2176}}) {
    Mirror w = random_mirror({out_f, in}, rng, DType::kBF16, 0.01f, 0.1f);
    const Tensor unit = Tensor::zeros({out_f}, DType::kF32, Device::kCuda);  // 1 + 0, zero-centred
    for (int64_t n : {1, 2, 3, 8, 9, 16, 19}) {
      const char* path = in % 8 != 0 ? "skinny" : n > 16 ? "gemm" : "fused";
      const std::string p = fmt::format("n_tokens={},in={},out={},path={}", n, in, out_f, path);
      Mirror xs = random_mirror({n, in + 8}, rng, DType::kBF16, -2.f, 2.f);  // x rows strided
      const Tensor xh = cols(xs.host, in), xd = cols(xs.dev, in);
      // input_rms
      Tensor ref = Tensor::zeros({n, out_f}, DType::kF32);
      linear_ref({.x = xh, .weight = w.host, .out = ref, .input_rms = true, .input_rms_eps = kEps},
                 ref_ctx());
      Tensor out = poisoned({n, out_f}, DType::kBF16);
      linear_cuda({.x = xd,
                   .weight = w.dev,
                   .out = out,
                   .input_rms = true,
                   .input_rms_eps = kEps,
                   .input_scratch = poisoned({n, in}, DType::kBF16)},
                  cs.ctx());
      // kAddToOut onto a residual, fused and unfused
      Mirror res = random_mirror({n, out_f}, rng, DType::kBF16, -4.f, 4.f);
      Tensor ref_sum = res.host.to(Device::kCpu);
      linear_ref({.x = xh,
                  .weight = w.host,
                  .out = ref_sum,
                  .epilogue = LinearEpilogue::kAddToOut,
                  .scratch = Tensor::zeros({n, out_f}, DType::kF32)},
                 ref_ctx());
      Tensor sum = res.dev.to(Device::kCuda), unfused = res.dev.to(Device::kCuda);
      linear_cuda({.x = xd,
                   .weight = w.dev,
                   .out = sum,
                   .epilogue = LinearEpilogue::kAddToOut,
                   .scratch = poisoned({n, out_f}, DType::kBF16)},
                  cs.ctx());
      Tensor y = poisoned({n, out_f}, DType::kBF16);
      linear_cuda({.x = xd, .weight = w.dev, .out = y}, cs.ctx());
      rms_norm_cuda(
          {.x = y, .weight = unit, .out = poisoned({n, out_f}, DType::kBF16), .residual = unfused},
          cs.ctx());
      cs.sync();
      check_case("linear.input_rms", p, rel_l2(download(out), gather(ref)), DType::kBF16);
      check_case("linear.add", p, rel_l2(download(sum), gather(ref_sum)), DType::kBF16);
      check_bits("linear.add_fused", p,
                 download_bits<uint16_t>(sum) == download_bits<uint16_t>(unfused));
      if (out_f % 16 != 0) continue;
      // input_rms with the swiglu epilogue (the MLP's gate|up reading the residual)
      Tensor ref_act = Tensor::zeros({n, out_f / 2}, DType::kF32);
      linear_ref({.x = xh,
                  .weight = w.host,
                  .out = ref_act,
                  .epilogue = LinearEpilogue::kSwiGluPairs,
                  .scratch = Tensor::zeros({n, out_f}, DType::kF32),
                  .input_rms = true,
                  .input_rms_eps = kEps},
                 ref_ctx());
      Tensor act = poisoned({n, out_f / 2}, DType::kBF16);
      linear_cuda({.x = xd,
                   .weight = w.dev,
                   .out = act,
                   .epilogue = LinearEpilogue::kSwiGluPairs,
                   .scratch = poisoned({n, out_f}, DType::kBF16),
                   .input_rms = true,
                   .input_rms_eps = kEps,
                   .input_scratch = poisoned({n, in}, DType::kBF16)},
                  cs.ctx());
      cs.sync();
      check_case("linear.input_rms_swiglu", p, rel_l2(download(act), gather(ref_act)),
                 DType::kBF16);
    }
  }
}

// Decode batches: decode_rows = n for n = 17..100 (groups of up to 32 rows: the wide
// configuration, and a narrow one for a last group of 1..16 rows) against the reference, with every
// epilogue and input_rms, x and out rows strided. in = 1003 takes the CUDA-core kernel (two token
// groups of 16 per decode group); 64 -> 48 one partial chunk; 4104 -> 100 a k-split of 8 uneven
// ranges; 5120 -> 2176 a k-split of 8 with ~8 tiles per cluster; 17408 -> 320 a k-split of 4.
TEST(CudaConformance, LinearDecodeRows) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(19);
  constexpr float kEps = 1e-6f;
  struct Form {
    const char* name;
    DType out_dtype;
    LinearEpilogue epilogue;
    bool input_rms;
  };
  const Form forms[] = {{"plain", DType::kBF16, LinearEpilogue::kNone, false},
                        {"plain_f32", DType::kF32, LinearEpilogue::kNone, false},
                        {"input_rms", DType::kBF16, LinearEpilogue::kNone, true},
                        {"add", DType::kBF16, LinearEpilogue::kAddToOut, false},
                        {"input_rms+add", DType::kBF16, LinearEpilogue::kAddToOut, true},
                        {"swiglu", DType::kBF16, LinearEpilogue::kSwiGluPairs, false},
                        {"input_rms+swiglu", DType::kBF16, LinearEpilogue::kSwiGluPairs, true}};
  for (const auto& [in, out_f] : {std::pair<int64_t, int64_t>{64, 48},
                                  {1003, 129},
                                  {4104, 100},
                                  {5120, 1000},
                                  {5120, 2176},
                                  {17408, 320},
                                  {3080, 1008}}) {
    const Mirror w = random_mirror({out_f, in}, rng, DType::kBF16, 0.01f, 0.1f);
    for (const int64_t n : {17, 24, 32, 33, 48, 64, 100}) {
      const int64_t xpad = 8, opad = 3;
      const Mirror xs = random_mirror({n, in + xpad}, rng, DType::kBF16, 0.05f, 2.f);
      const Tensor xh = cols(xs.host, in), xd = cols(xs.dev, in);
      const Mirror res = random_mirror({n, out_f + opad}, rng, DType::kBF16, 0.05f, 4.f);
      for (const Form& f : forms) {
        const bool pairs = f.epilogue == LinearEpilogue::kSwiGluPairs;
        const bool add = f.epilogue == LinearEpilogue::kAddToOut;
        if (pairs && out_f % 16 != 0) continue;
        const int64_t width = pairs ? out_f / 2 : out_f;
        Tensor ref =
            add ? res.host.to(Device::kCpu) : Tensor::zeros({n, width + opad}, DType::kF32);
        linear_ref(
            {.x = xh,
             .weight = w.host,
             .out = cols(ref, width),
             .epilogue = f.epilogue,
             .scratch = f.epilogue != LinearEpilogue::kNone ? Tensor::zeros({n, out_f}, DType::kF32)
                                                            : Tensor(),
             .input_rms = f.input_rms,
             .input_rms_eps = kEps},
            ref_ctx());
        Tensor out = add ? res.dev.to(Device::kCuda) : poisoned({n, width + opad}, f.out_dtype);
        linear_cuda(
            {.x = xd,
             .weight = w.dev,
             .out = cols(out, width),
             .epilogue = f.epilogue,
             .scratch = f.epilogue != LinearEpilogue::kNone ? poisoned({n, out_f}, DType::kBF16)
                                                            : Tensor(),
             .input_rms = f.input_rms,
             .input_rms_eps = kEps,
             .input_scratch = f.input_rms ? poisoned({n, in}, DType::kBF16) : Tensor(),
             .decode_rows = n},
            cs.ctx());
        cs.sync();
        const auto view = [&](const Tensor& t) { return cols(t, width); };
        const std::vector<int32_t> each_row = row_starts(std::vector<int64_t>(n, 1));
        check_case("linear.decode_rows",
                   fmt::format("n_tokens={},decode_rows={},in={},out={},form={},path={}", n, n, in,
                               out_f, f.name, in % 8 != 0 ? "skinny" : "persistent"),
                   max_rel_l2(download(out, view), gather(view(ref)), seq_ranges(each_row, width)),
                   f.out_dtype);
      }
    }
  }
}

TEST(CudaConformance, Rope) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(5);
  for (int64_t n : kTokenCounts) {
    for (int rotary : {64, 256}) {
      const int64_t heads = 5, d = 256;
      Mirror buf = random_mirror({n, heads, 2 * d}, rng);  // rope on the q half of q|gate
      std::vector<int32_t> pos(n);
      for (auto& p : pos) p = rng.index(40000);
      Tensor ref_buf = buf.host.to(Device::kCpu);
      rope_ref({ref_buf.slice(2, 0, d), host_i32(pos), rotary, 1e7f}, ref_ctx());
      rope_cuda({buf.dev.slice(2, 0, d), device_i32(pos), rotary, 1e7f}, cs.ctx());
      cs.sync();
      check_case("rope",
                 fmt::format("n_tokens={},heads={},head_dim={},rotary_dim={},strided", n, heads, d,
                             rotary),
                 rel_l2(download(buf.dev), gather(ref_buf)), DType::kBF16);
    }
  }
}

// q_norm / k_norm with the partial RoPE in the same call (rms_norm.h), on the query half of a
// q|gate view, in place: fused in the vector kernel (rotary 64, 256) or as a second launch
// (rotary 36, not a multiple of 8).
TEST(CudaConformance, RmsNormRope) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(12);
  for (int64_t n : kTokenCounts) {
    for (int rotary : {64, 256, 36}) {
      const int64_t heads = 5, d = 256;
      Mirror qg = random_mirror({n, heads, 2 * d}, rng);
      Mirror w = random_mirror({d}, rng, DType::kF32, 0.05f, 0.5f);
      std::vector<int32_t> pos(n);
      for (auto& p : pos) p = rng.index(40000);
      Tensor ref_qg = qg.host.to(Device::kCpu);
      const Tensor ref_q = ref_qg.slice(2, 0, d);
      rms_norm_ref({ref_q, w.host, ref_q, Tensor(), 1e-6f, true, host_i32(pos), rotary, 1e7f},
                   ref_ctx());
      const Tensor q = qg.dev.slice(2, 0, d);
      rms_norm_cuda({q, w.dev, q, Tensor(), 1e-6f, true, device_i32(pos), rotary, 1e7f}, cs.ctx());
      cs.sync();
      check_case("rms_norm.rope",
                 fmt::format("n_tokens={},heads={},head_dim={},rotary_dim={},strided,in_place", n,
                             heads, d, rotary),
                 rel_l2(download(qg.dev), gather(ref_qg)), DType::kBF16);
    }
  }
}

TEST(CudaConformance, Swiglu) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(7);
  for (int64_t n : kTokenCounts) {
    for (int64_t inter : {17, 1000, 17408}) {
      Mirror gu = random_mirror({n, 2 * inter}, rng, DType::kBF16, 0.05f, 4.f);  // fused gate|up
      Tensor ref_out = Tensor::zeros({n, inter}, DType::kF32);
      swiglu_ref({gu.host.slice(1, 0, inter), gu.host.slice(1, inter, 2 * inter), ref_out},
                 ref_ctx());
      Tensor out = poisoned({n, inter}, DType::kBF16);
      swiglu_cuda({gu.dev.slice(1, 0, inter), gu.dev.slice(1, inter, 2 * inter), out}, cs.ctx());
      cs.sync();
      check_case("swiglu", fmt::format("n_tokens={},inter={},strided", n, inter),
                 rel_l2(download(out), gather(ref_out)), DType::kBF16);
      if (inter % 8 != 0) continue;
      // The same gate|up tensor read in the pair layout (swiglu.h), as the MLP's epilogue does.
      Tensor ref_pairs = Tensor::zeros({n, inter}, DType::kF32);
      swiglu_ref({.out = ref_pairs, .gate_up = gu.host}, ref_ctx());
      Tensor pairs = poisoned({n, inter}, DType::kBF16);
      swiglu_cuda({.out = pairs, .gate_up = gu.dev}, cs.ctx());
      cs.sync();
      check_case("swiglu", fmt::format("n_tokens={},inter={},pairs", n, inter),
                 rel_l2(download(pairs), gather(ref_pairs)), DType::kBF16);
    }
  }
}

TEST(CudaConformance, Argmax) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(8);
  for (int64_t n : {1, 2, 9, 19}) {
    for (int64_t vocab : {1, 7, 151936, 248320}) {
      Tensor logits = host_random({n, vocab}, rng, 0.f, 8.f);
      float* l = logits.data<float>();
      for (int64_t t = 0; t < n && vocab > 3; ++t) {  // a NaN, and a tie between two maxima
        l[t * vocab + rng.index(static_cast<int32_t>(vocab))] = NAN;
        const int32_t i = rng.index(static_cast<int32_t>(vocab - 1)), j = i + 1;
        l[t * vocab + i] = l[t * vocab + j] = 100.f;
      }
      Tensor ref_out = Tensor::zeros({n}, DType::kI32);
      argmax_ref({logits, ref_out}, ref_ctx());
      Tensor out = poisoned({n}, DType::kI32);
      argmax_cuda({logits.to(Device::kCuda), out}, cs.ctx());
      cs.sync();
      const auto got = download_bits<int32_t>(out);
      bool equal = true;
      for (int64_t t = 0; t < n; ++t) equal &= got[t] == ref_out.data<int32_t>()[t];
      check_case("argmax", fmt::format("n_tokens={},vocab={},nan+tie", n, vocab), equal ? 0.0 : 1.0,
                 DType::kI32);
    }
  }
}

}  // namespace
}  // namespace tandem::test