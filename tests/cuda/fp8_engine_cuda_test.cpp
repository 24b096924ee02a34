// FP8 checkpoints on the GPU (docs/fp8.md), on the shipped model made FP8 by
// tools/make_fp8_checkpoint.py (fp8_fixtures.h):
//  - the loader keeps FP8 matrices FP8 on the device: the CPU loader's f8_e4m3 bytes and f32
//    scales, and the pre-norm as LinearWeight::fold exactly on the FP8 parts a bf16 matrix folds;
//  - logits (prefill rows and a decode row) within the first-order bound of the GPU's bf16
//    roundings of the CPU FP8 model's, and greedy output equal to the CPU's up to its first
//    near-tie (engine_cuda_test.cpp's rule);
//  - greedy output with MTP equals plain decoding for k = 1..8;
//  - 16 requests of different prompt lengths, batched with graphs, equal their solo runs;
//  - prefill rows on the tensor cores (FP8 activations; the 0.8B-FP8 shape, synthetic weights)
//    keep batched = solo and MTP = plain;
//  - synthetic FP8 weights on CUDA are the CPU's, byte for byte, with their norms as folds.
// Skipped without a GPU. Everything but the load checks needs the CUDA FP8 linear kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "batch_support.h"
#include "engine/synthetic.h"
#include "engine_cuda_support.h"
#include "fp8_fixtures.h"
#include "kernels/linear/linear.h"  // kFp8BlockCols
#include "spec/mtp_drafter.h"

namespace tandem {
namespace {

// ---- the bound of GPU logits against the CPU's ----
// Every bf16 rounding on one token's path moves what it rounds by at most 2^-9 of itself; the
// bound counts them, each reaching the logits unamplified (first order, as fp8_test.cpp bounds
// bf16 weight rounding), relative to the row's largest logit. On the tiny model (8 blocks):
//  - activations, 10 per block (GDN: in_proj's output, conv1d's, the delta rule's and its gated
//    norm's, out_proj's y and its residual add, gate|up's y, the SwiGLU product, down_proj's y and
//    its residual add; attention: q|k|v, q/k norm with RoPE, the softmax weights and the output,
//    o_proj's y and add, and the MLP's four) and the final norm: 8 x 10 + 1;
//  - the folded pre-norms, 2 input projections per block, 2 roundings each: the input RMS scaling
//    of prefill rows (LinearArgs::input_scratch) and the fold (a bf16 matrix's W (1 + g) rounded at
//    load; an FP8 matrix's bf16(x + x g) or folded bf16 copy in its kernel): 8 x 2 x 2;
//  - FP8 matrices only: each dequantised weight rounded to bf16 for a bf16 product, 4 per block
//    (fp8_test.cpp's 32, its bound of the bf16-dequantised model).
constexpr int kActivationRoundings = 8 * 10 + 1, kFoldRoundings = 8 * 2 * 2, kFp8Roundings = 32;
const double kBf16Bound = (kActivationRoundings + kFoldRoundings) * std::ldexp(1.0, -9);
const double kFp8Bound =
    (kActivationRoundings + kFoldRoundings + kFp8Roundings) * std::ldexp(1.0, -9);

std::string fp8_dir() { return (testing::fp8_fixtures() / "fp8").string(); }

// Host copies of a and b hold the same bytes.
bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ha = a.host(), hb = b.host();
  return std::memcmp(ha.raw(), hb.raw(), static_cast<size_t>(ha.nbytes())) == 0;
}

// An FP8 matrix on the device: its bytes and scales those of the CPU loader's (no requantising, no
// widening), f32 scales of its row groups, `norm` as its fold (none: no fold), and nbytes() one
// byte per weight plus the scales and the fold.
void expect_fp8_on_device(const LinearWeight& gpu, const LinearWeight& cpu, const Tensor* norm,
                          const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(gpu.weight.dtype(), DType::kF8E4M3);
  EXPECT_EQ(gpu.weight.device(), Device::kCuda);
  EXPECT_TRUE(gpu.weight.is_contiguous());
  EXPECT_TRUE(same_bytes(gpu.weight, cpu.weight));
  ASSERT_EQ(gpu.scale_inv.dtype(), DType::kF32);
  EXPECT_EQ(gpu.scale_inv.device(), Device::kCuda);
  EXPECT_EQ(gpu.scale_block_rows, cpu.scale_block_rows);
  EXPECT_EQ(gpu.scale_inv.shape(),
            (Shape{(gpu.out() + gpu.scale_block_rows - 1) / gpu.scale_block_rows,
                   (gpu.weight.dim(1) + kernels::kFp8BlockCols - 1) / kernels::kFp8BlockCols}));
  EXPECT_TRUE(same_bytes(gpu.scale_inv, cpu.scale_inv));
  int64_t fold_bytes = 0;
  if (norm == nullptr) {
    EXPECT_EQ(gpu.fold.raw(), nullptr);
  } else {
    ASSERT_NE(gpu.fold.raw(), nullptr);
    EXPECT_EQ(gpu.fold.dtype(), DType::kBF16);
    EXPECT_EQ(gpu.fold.device(), Device::kCuda);
    EXPECT_EQ(gpu.fold.shape(), (Shape{gpu.weight.dim(1)}));
    EXPECT_TRUE(same_bytes(gpu.fold, *norm));  // g itself, zero-centred, bf16 as stored
    fold_bytes = gpu.fold.nbytes();
  }
  EXPECT_EQ(gpu.nbytes(), gpu.numel() + gpu.scale_inv.nbytes() + fold_bytes);
}

void expect_bf16_on_device(const LinearWeight& gpu, const std::string& what) {
  EXPECT_EQ(gpu.weight.dtype(), DType::kBF16) << what;
  EXPECT_EQ(gpu.weight.device(), Device::kCuda) << what;
  EXPECT_EQ(gpu.scale_inv.raw(), nullptr) << what;
  EXPECT_EQ(gpu.fold.raw(), nullptr) << what;
}

// Returns the number of FP8 matrices checked.
int expect_layer(const DecoderLayerWeights& gpu, const DecoderLayerWeights& cpu,
                 const std::string& p) {
  if (gpu.type == LayerType::kFullAttention) {
    EXPECT_EQ(gpu.attn.qkv_proj.size(), 1u) << p;
    if (gpu.attn.qkv_proj.size() != 1u) return 0;
    expect_fp8_on_device(gpu.attn.qkv_proj[0], cpu.attn.qkv_proj[0], &cpu.input_norm, p + "q|k|v");
    expect_fp8_on_device(gpu.attn.o_proj, cpu.attn.o_proj, nullptr, p + "o_proj");
  } else {  // qkv|z FP8 with the fold, b|a bf16 with the norm folded in
    EXPECT_EQ(gpu.gdn.in_proj.size(), 2u) << p;
    if (gpu.gdn.in_proj.size() != 2u) return 0;
    expect_fp8_on_device(gpu.gdn.in_proj[0], cpu.gdn.in_proj[0], &cpu.input_norm, p + "qkv|z");
    expect_bf16_on_device(gpu.gdn.in_proj[1], p + "b|a");
    expect_fp8_on_device(gpu.gdn.out_proj, cpu.gdn.out_proj, nullptr, p + "out_proj");
  }
  expect_fp8_on_device(gpu.mlp.gate_up_proj, cpu.mlp.gate_up_proj, &cpu.post_attention_norm,
                       p + "gate|up");
  EXPECT_EQ(gpu.mlp.gate_up_proj.scale_block_rows, kernels::kSwigluPairGroup) << p;
  expect_fp8_on_device(gpu.mlp.down_proj, cpu.mlp.down_proj, nullptr, p + "down_proj");
  return 4;
}

TEST(Fp8EngineCuda, LoadKeepsFp8MatricesFp8OnTheDeviceWithTheirFolds) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto gpu = testing::load_dir_on(fp8_dir(), Device::kCuda);
  const auto cpu = testing::load_dir_on(fp8_dir(), Device::kCpu);
  const Qwen35Weights &g = gpu->weights(), &c = cpu->weights();
  EXPECT_TRUE(g.norms_folded);
  ASSERT_EQ(g.layers.size(), c.layers.size());
  int fp8 = 0;
  for (size_t l = 0; l < g.layers.size(); ++l)
    fp8 += expect_layer(g.layers[l], c.layers[l], "layer " + std::to_string(l) + " ");
  ASSERT_TRUE(g.mtp.has_value());
  fp8 += expect_layer(g.mtp->layer, c.mtp->layer, "mtp ");
  EXPECT_EQ(fp8, 9 * 4);  // every FP8 matrix of the checkpoint (fp8_test.cpp counts 57 unstacked)
  expect_bf16_on_device(g.lm_head, "lm_head");
  expect_bf16_on_device(g.mtp->fc, "mtp.fc");
  EXPECT_EQ(g.embed_tokens.dtype(), DType::kBF16);
  EXPECT_EQ(max_fp8_numel(g), max_fp8_numel(c));
  EXPECT_GT(max_fp8_numel(g), 0);
}

// ---- logits against the CPU FP8 model ----

struct LogitError {
  double prefill = 0, decode = 0, max_abs = 0;  // worst per-row max|diff| / max|logit|; max|diff|
};

// Row t of got against row r of ref.
void add_row(LogitError& e, double& worst, const Tensor& got, int64_t t, const Tensor& ref,
             int64_t r) {
  const int64_t v = ref.dim(1);
  const float* x = got.data<const float>() + t * v;
  const float* y = ref.data<const float>() + r * v;
  double err = 0, scale = 0;
  for (int64_t i = 0; i < v; ++i) {
    err = std::max(err, std::fabs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
  }
  worst = std::max(worst, err / scale);
  e.max_abs = std::max(e.max_abs, err);
}

// The GPU model's logits of every golden prompt against the CPU model's: every row as a prefill
// (the first decoding step reads the last), and the last token again as a decode row after a
// prefill of the others (the decode kernels' family).
LogitError logit_error(Qwen35Model& gpu, Qwen35Model& cpu) {
  LogitError e;
  for (const std::vector<int32_t>& ids : testing::golden_prompts()) {
    Generator a(gpu, nullptr, GeneratorOptions{.max_context = 512});
    Generator b(cpu, nullptr, GeneratorOptions{.max_context = 512});
    const Tensor got = a.score(ids), ref = b.score(ids);
    const int64_t n = ref.dim(0);
    for (int64_t t = 0; t < n; ++t) add_row(e, e.prefill, got, t, ref, t);
    testing::Solo solo(gpu);
    if (n > 1) {
      solo.step(std::span<const int32_t>(ids.data(), n - 1), false);
      solo.seq().commit_prefill(n - 1);
    }
    const Tensor last = solo.step(std::span<const int32_t>(&ids[n - 1], 1), true);
    add_row(e, e.decode, last, 0, ref, n - 1);
  }
  return e;
}

// The bound's own check: the shipped bf16 model (kernels of today) against its CPU reference.
TEST(Fp8EngineCuda, Bf16BaselineLogitsWithinTheirRoundingBound) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = testing::fixture_dir(testing::kTrainedModel);
  const auto gpu = testing::load_dir_on(dir, Device::kCuda);
  const auto cpu = testing::load_dir_on(dir, Device::kCpu);
  const LogitError e = logit_error(*gpu, *cpu);
  std::printf(
      "[bf16 gpu vs cpu] max|diff|/max|logit| per row: prefill %.3g, decode %.3g (bound %.3g); "
      "max|diff| %.3g\n",
      e.prefill, e.decode, kBf16Bound, e.max_abs);
  EXPECT_LE(e.prefill, kBf16Bound);
  EXPECT_LE(e.decode, kBf16Bound);
}

TEST(Fp8EngineCuda, LogitsAndGreedyOutputAgreeWithTheCpuFp8Model) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto gpu = testing::load_dir_on(fp8_dir(), Device::kCuda);
  const auto cpu = testing::load_dir_on(fp8_dir(), Device::kCpu);
  const LogitError e = logit_error(*gpu, *cpu);
  std::printf(
      "[fp8 gpu vs cpu] max|diff|/max|logit| per row: prefill %.3g, decode %.3g (bound %.3g); "
      "max|diff| %.3g\n",
      e.prefill, e.decode, kFp8Bound, e.max_abs);
  EXPECT_LE(e.prefill, kFp8Bound);
  EXPECT_LE(e.decode, kFp8Bound);
  EXPECT_GT(e.prefill, 0.0);  // bf16 activations: not the CPU's bits
  constexpr int kTokens = 32;
  for (const std::vector<int32_t>& prompt : testing::golden_prompts()) {
    const auto gpu_tokens = testing::generate(*gpu, nullptr, 0, prompt, kTokens);
    const auto cpu_tokens = testing::generate(*cpu, nullptr, 0, prompt, kTokens);
    ASSERT_EQ(gpu_tokens.size(), static_cast<size_t>(kTokens));
    const testing::CpuAgreement a = testing::cpu_agreement(*cpu, prompt, cpu_tokens, gpu_tokens);
    std::printf(
        "[fp8 gpu vs cpu] prompt of %zu: agree on %zu of %d tokens; first CPU near-tie (margin < "
        "%.2f) at token %zu\n",
        prompt.size(), a.agree, kTokens, testing::kNearTieMargin, a.near_tie);
    EXPECT_GE(a.agree, a.near_tie) << "prompt of " << prompt.size();
  }
}

// ---- exactness on the GPU ----

TEST(Fp8EngineCuda, MtpEqualsPlainForEveryK) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto gpu = testing::load_dir_on(fp8_dir(), Device::kCuda);
  ASSERT_TRUE(gpu->has_mtp());
  const std::vector<int32_t> prompt = testing::golden_prompts().back();
  constexpr int kTokens = 64;
  const auto plain = testing::generate(*gpu, nullptr, 0, prompt, kTokens);
  ASSERT_EQ(plain.size(), static_cast<size_t>(kTokens));
  for (int k = 1; k <= 8; ++k)
    EXPECT_EQ(testing::generate(*gpu, std::make_unique<MtpDrafter>(*gpu), k, prompt, kTokens),
              plain)
        << "mtp k=" << k;
}

// 16 requests at once, prompts of 1..400 tokens (around the 16-row decode limit and the 128-row
// blocks), half of them sampled: each output equals its solo run without speculation, bit for bit,
// with graphs on, under plain decoding, MTP k = 1..3 and adaptive control.
TEST(Fp8EngineCuda, SixteenRequestsBatchedEqualTheirSoloRuns) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto gpu = testing::load_dir_on(fp8_dir(), Device::kCuda);
  const int64_t lengths[16] = {1, 2, 3, 5, 8, 15, 16, 17, 31, 33, 64, 100, 127, 129, 255, 400};
  std::mt19937_64 rng(16);
  std::vector<testing::Arrival> arrivals;
  for (int i = 0; i < 16; ++i) {
    testing::Arrival a{.step = 0, .req = {}};
    for (int64_t t = 0; t < lengths[i]; ++t)
      a.req.prompt.push_back(static_cast<int32_t>(rng() % gpu->config().vocab_size));
    a.req.max_tokens = 24 + i;
    a.req.stop_ids = gpu->config().eos_token_ids;
    if (i % 2 == 1)
      a.req.sampling = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 1000u + i};
    arrivals.push_back(std::move(a));
  }
  const auto reference = testing::solo(*gpu, arrivals);
  for (const testing::SpecConfig& c : testing::spec_configs()) {
    std::unique_ptr<Drafter> d;
    if (c.k > 0) d = std::make_unique<MtpDrafter>(*gpu);
    BatchEngine engine(*gpu, std::move(d), testing::batch_options(c.k, c.control, 16, 512));
    ASSERT_TRUE(engine.uses_cuda_graphs());
    const testing::BatchRun r = testing::run_batch(engine, arrivals);
    const int bad = testing::mismatches(r.tokens, reference, c.name);
    std::printf(
        "[fp8 cuda batch] %s: %lld steps (%lld from graphs), up to %lld running, %d differ\n",
        c.name, static_cast<long long>(r.counters.steps),
        static_cast<long long>(r.counters.graph_steps), static_cast<long long>(r.max_running), bad);
    EXPECT_EQ(bad, 0) << c.name;
    EXPECT_GT(r.counters.graph_steps, 0) << c.name;
    EXPECT_GT(r.max_running, 1) << c.name;  // really batched
  }
}

// Prefill rows on the tensor cores (production; the shipped model's FP8 matrices are too narrow
// for that path, in = 320 / 832, so this runs the 0.8B-FP8 shape on synthetic weights, whose in =
// 1024 / 2048 / 3584 matrices it takes): the path runs, and the engine stays exact on it: 8
// requests of 1..400 tokens (chunked by a 256-row budget), batched with graphs, each equal to its
// solo run under plain decoding, MTP k = 1..3 and adaptive; greedy MTP equal to plain for k = 1..4.
TEST(Fp8EngineCuda, TensorCorePrefillKeepsTheEngineExact) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  ModelConfig cfg = ModelConfig::from_file(testing::source_path("configs/qwen3.5-0.8b-fp8.json"));
  cfg.num_layers = 8;  // two attention layers and six GDN layers: the test's time
  cfg.layer_types.resize(8);
  Qwen35Weights w = synthetic_qwen35_weights(cfg, Device::kCuda, 42, true);
  Qwen35Model model(std::move(cfg), std::move(w), ExecContext{.device = Device::kCuda}, 512);
  const int64_t calls = kernels::linear_fp8_prefill_tensor_core_calls();
  const int64_t lengths[8] = {1, 7, 16, 33, 100, 129, 257, 400};
  std::mt19937_64 rng(8);
  std::vector<testing::Arrival> arrivals;
  for (int i = 0; i < 8; ++i) {
    testing::Arrival a{.step = i % 3, .req = {}};
    for (int64_t t = 0; t < lengths[i]; ++t)
      a.req.prompt.push_back(static_cast<int32_t>(rng() % model.config().vocab_size));
    a.req.max_tokens = 12 + i;
    if (i % 2 == 1)
      a.req.sampling = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 2000u + i};
    arrivals.push_back(std::move(a));
  }
  const auto reference = testing::solo(model, arrivals);
  EXPECT_GT(kernels::linear_fp8_prefill_tensor_core_calls(), calls)
      << "no prefill row took the tensor-core path";
  for (const testing::SpecConfig& c : testing::spec_configs()) {
    std::unique_ptr<Drafter> d;
    if (c.k > 0) d = std::make_unique<MtpDrafter>(model);
    BatchEngine engine(model, std::move(d), testing::batch_options(c.k, c.control, 8, 256));
    ASSERT_TRUE(engine.uses_cuda_graphs());
    const testing::BatchRun r = testing::run_batch(engine, arrivals);
    const int bad = testing::mismatches(r.tokens, reference, c.name);
    std::printf("[fp8 tensor-core prefill batch] %s: %lld steps, up to %lld running, %d differ\n",
                c.name, static_cast<long long>(r.counters.steps),
                static_cast<long long>(r.max_running), bad);
    EXPECT_EQ(bad, 0) << c.name;
    EXPECT_GT(r.max_running, 1) << c.name;
  }
  const std::vector<int32_t>& prompt = arrivals.back().req.prompt;
  const auto plain = testing::generate(model, nullptr, 0, prompt, 24);
  for (int k = 1; k <= 4; ++k)
    EXPECT_EQ(testing::generate(model, std::make_unique<MtpDrafter>(model), k, prompt, 24), plain)
        << "mtp k=" << k;
}

// ---- synthetic weights (tandem bench --synthetic) ----

// The 0.8B FP8 shape on CUDA: every FP8 matrix the CPU's (the same uniform values, quantised
// alike), its norm as the fold where the forward expects it folded, and the bench's byte count one
// byte per FP8 weight (the CPU's count plus the folds).
TEST(Fp8EngineCuda, SyntheticFp8WeightsAreTheCpuOnesWithFolds) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig cfg =
      ModelConfig::from_file(testing::source_path("configs/qwen3.5-0.8b-fp8.json"));
  ASSERT_TRUE(cfg.quantization.fp8);
  const Qwen35Weights c = synthetic_qwen35_weights(cfg, Device::kCpu, 42, true);
  const Qwen35Weights g = synthetic_qwen35_weights(cfg, Device::kCuda, 42, true);
  EXPECT_FALSE(c.norms_folded);
  EXPECT_TRUE(g.norms_folded);
  int64_t fold_bytes = 0;
  auto check = [&](const DecoderLayerWeights& gl, const DecoderLayerWeights& cl,
                   const std::string& p, bool counted) {
    const bool attn = gl.type == LayerType::kFullAttention;
    const LinearWeight& gin = attn ? gl.attn.qkv_proj.at(0) : gl.gdn.in_proj.at(0);
    const LinearWeight& cin = attn ? cl.attn.qkv_proj.at(0) : cl.gdn.in_proj.at(0);
    // Synthetic norms are filled on each device: the folds are compared by identity.
    expect_fp8_on_device(gin, cin, &gl.input_norm, p + "in");
    EXPECT_EQ(gin.fold.raw(), gl.input_norm.raw()) << p;
    expect_fp8_on_device(gl.mlp.gate_up_proj, cl.mlp.gate_up_proj, &gl.post_attention_norm,
                         p + "gate|up");
    EXPECT_EQ(gl.mlp.gate_up_proj.fold.raw(), gl.post_attention_norm.raw()) << p;
    expect_fp8_on_device(attn ? gl.attn.o_proj : gl.gdn.out_proj,
                         attn ? cl.attn.o_proj : cl.gdn.out_proj, nullptr, p + "out");
    expect_fp8_on_device(gl.mlp.down_proj, cl.mlp.down_proj, nullptr, p + "down");
    if (!attn) expect_bf16_on_device(gl.gdn.in_proj.at(1), p + "b|a");
    for_each_linear(cl, [&](const LinearWeight& w) { EXPECT_EQ(w.fold.raw(), nullptr) << p; });
    if (counted) fold_bytes += gin.fold.nbytes() + gl.mlp.gate_up_proj.fold.nbytes();
  };
  ASSERT_EQ(g.layers.size(), c.layers.size());
  for (size_t l = 0; l < g.layers.size(); ++l)
    check(g.layers[l], c.layers[l], "layer " + std::to_string(l) + " ", true);
  check(g.mtp->layer, c.mtp->layer, "mtp ", false);  // not on a decode step's path
  EXPECT_EQ(weight_bytes_per_step(g), weight_bytes_per_step(c) + fold_bytes);
  EXPECT_EQ(max_fp8_numel(g), max_fp8_numel(c));
}

}  // namespace
}  // namespace tandem
