// Block-scaled FP8 checkpoints (docs/fp8.md) on the CPU reference, made from the shipped model by
// tools/make_fp8_checkpoint.py (run once into the build tree, with the same model dequantised to
// f32 and to bf16):
//  - the layout is the released one, and the script's e4m3 rounding equals f32_to_f8e4m3;
//  - logits equal the f32-dequantised model's bit for bit (the reference's FP8 linear is the linear
//    of the fp32 dequantisation, linear.h), and stay within the bound of bf16 weight rounding of
//    the bf16-dequantised model;
//  - greedy output with MTP equals plain decoding for k = 1..8 on the FP8 model;
//  - each refused layout gives its message through `tandem generate`, exit 1.
#include "model/fp8.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "fp8_fixtures.h"
#include "kernels/kernel_test_util.h"
#include "model/safetensors.h"
#include "spec/mtp_drafter.h"
#include "test_support.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

fs::path fixtures() { return testing::fp8_fixtures(); }

std::unique_ptr<Qwen35Model> load(const std::string& variant) {
  return testing::load_model_dir((fixtures() / variant).string());
}

std::vector<std::vector<int32_t>> prompts() { return testing::golden_prompts(); }

bool is_quantized(const std::string& name) {
  for (const char* s :
       {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight",
        "linear_attn.out_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
        "mlp.down_proj.weight"})
    if (name.size() >= std::strlen(s) &&
        name.compare(name.size() - std::strlen(s), std::string::npos, s) == 0)
      return true;
  return false;
}

TEST(Fp8Checkpoint, HasTheReleasedLayoutAndRoundsAsF32ToF8e4m3) {
  const Checkpoint src = Checkpoint::open(testing::fixture_dir(testing::kTrainedModel));
  const Checkpoint ck = Checkpoint::open((fixtures() / "fp8").string());
  const auto cfg = testing::read_json((fixtures() / "fp8/config.json").string());
  const auto& q = cfg["quantization_config"];
  EXPECT_EQ(q["quant_method"], "fp8");
  EXPECT_EQ(q["fmt"], "e4m3");
  EXPECT_EQ(q["activation_scheme"], "dynamic");
  EXPECT_EQ(q["weight_block_size"], nlohmann::json::array({128, 128}));
  int64_t quantized = 0, codes = 0;
  for (const std::string& name : src.names()) {
    const Tensor w = ck.get(name);
    if (!is_quantized(name)) {  // kept as it was: embeddings, norms, conv1d, in_proj_a/b, mtp.fc
      EXPECT_EQ(w.dtype(), DType::kBF16) << name;
      EXPECT_FALSE(ck.has(name + "_scale_inv")) << name;
      continue;
    }
    ++quantized;
    ASSERT_EQ(w.dtype(), DType::kF8E4M3) << name;
    const Tensor s = ck.get(name + "_scale_inv");
    ASSERT_EQ(s.dtype(), DType::kF32) << name;
    ASSERT_EQ(s.shape(), (Shape{(w.dim(0) + 127) / 128, (w.dim(1) + 127) / 128})) << name;
    // The script's rounding: q = e4m3(f32(w / scale)), nearest even, saturating.
    const Tensor b = src.get(name).to_f32();
    const int64_t cols = w.dim(1), kb = s.dim(1);
    for (int64_t i = 0; i < w.numel(); ++i, ++codes) {
      const float scale = s.data<const float>()[(i / cols / 128) * kb + (i % cols) / 128];
      ASSERT_EQ(w.data<const f8e4m3>()[i].bits,
                f32_to_f8e4m3(b.data<const float>()[i] / scale).bits)
          << name << " element " << i;
    }
  }
  EXPECT_EQ(quantized,
            9 * 3 + 3 * 4 + 6 * 3);  // MLP x 9 blocks (MTP's too), attention x 3, GDN x 6
  std::printf("[fp8 layout] %lld FP8 matrices, %lld codes equal to f32_to_f8e4m3\n",
              static_cast<long long>(quantized), static_cast<long long>(codes));
}

// The dequantisation (model/fp8.h, then bf16) of every FP8 matrix equals the script's
// f32-dequantised checkpoint bit for bit, and its bf16 rounding the bf16 one.
TEST(Fp8Checkpoint, LoadTimeDequantizationEqualsTheDequantizedCheckpoints) {
  const Checkpoint ck = Checkpoint::open((fixtures() / "fp8").string());
  const Checkpoint f32 = Checkpoint::open((fixtures() / "f32").string());
  const Checkpoint b16 = Checkpoint::open((fixtures() / "bf16").string());
  int matrices = 0;
  for (const std::string& name : ck.names()) {
    if (ck.get(name).dtype() != DType::kF8E4M3) continue;
    ++matrices;
    const Tensor d = fp8_dequantize(ck.get(name), ck.get(name + "_scale_inv"), 128);
    const Tensor want = f32.get(name), want_bf16 = b16.get(name);
    ASSERT_EQ(d.shape(), want.shape()) << name;
    EXPECT_EQ(std::memcmp(d.raw(), want.raw(), static_cast<size_t>(d.nbytes())), 0) << name;
    int64_t bf16_mismatch = 0;
    for (int64_t i = 0; i < d.numel(); ++i)
      bf16_mismatch +=
          f32_to_bf16(d.data<const float>()[i]).bits != want_bf16.data<const bf16>()[i].bits;
    EXPECT_EQ(bf16_mismatch, 0) << name;
  }
  EXPECT_EQ(matrices, 57);
}

TEST(Fp8Model, LogitsEqualTheF32DequantizedModelBitwise) {
  auto fp8 = load("fp8");
  auto f32 = load("f32");
  for (const auto& ids : prompts()) {
    Generator a(*fp8, nullptr, GeneratorOptions{.max_context = 512});
    Generator b(*f32, nullptr, GeneratorOptions{.max_context = 512});
    const Tensor la = a.score(ids), lb = b.score(ids);
    ASSERT_EQ(la.shape(), lb.shape());
    EXPECT_EQ(std::memcmp(la.raw(), lb.raw(), static_cast<size_t>(la.nbytes())), 0)
        << "prompt of " << ids.size();
  }
}

// The bf16-dequantised model rounds every FP8 weight's fp32 value w to bf16: |dw| <= 2^-9 |w|. One
// linear then moves an output y = sum x_i w_i by at most 2^-9 sum |x_i w_i|; the test measures, per
// logit row, the error relative to that row's largest logit and bounds it by 2^-9 per weight
// matrix on a token's path (8 blocks x 4 FP8 projections = 32; lm_head is bf16 in both): the
// first-order worst case when each matrix's rounding reaches the residual stream unamplified.
TEST(Fp8Model, LogitsWithinBf16WeightRoundingOfTheBf16DequantizedModel) {
  auto fp8 = load("fp8");
  auto bf16m = load("bf16");
  const double bound = 32 * std::ldexp(1.0, -9);
  double worst = 0, worst_abs = 0, sum_sq = 0, sum_ref_sq = 0;
  int rows = 0, argmax_rows = 0, argmax_mismatch = 0;
  for (const auto& ids : prompts()) {
    Generator a(*fp8, nullptr, GeneratorOptions{.max_context = 512});
    Generator b(*bf16m, nullptr, GeneratorOptions{.max_context = 512});
    const Tensor la = a.score(ids), lb = b.score(ids);
    const int64_t v = la.dim(1);
    for (int64_t t = 0; t < la.dim(0); ++t, ++rows) {
      const float* x = la.data<const float>() + t * v;
      const float* y = lb.data<const float>() + t * v;
      double err = 0, ref = 0;
      int64_t best = 0, second = -1, got = 0;
      for (int64_t i = 0; i < v; ++i) {
        err = std::max(err, std::fabs(static_cast<double>(x[i]) - y[i]));
        ref = std::max(ref, std::fabs(static_cast<double>(x[i])));
        sum_sq += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
        sum_ref_sq += static_cast<double>(x[i]) * x[i];
        if (y[i] > y[got]) got = i;
        if (x[i] > x[best]) {
          second = best;
          best = i;
        } else if (i != best && (second < 0 || x[i] > x[second])) {
          second = i;
        }
      }
      worst = std::max(worst, err / ref);
      worst_abs = std::max(worst_abs, err);
      // argmax must agree where the FP8 top-2 margin exceeds twice the row's error bound
      if (second >= 0 && x[best] - x[second] > 2 * bound * ref) {
        ++argmax_rows;
        argmax_mismatch += got != best;
      }
    }
  }
  std::printf(
      "[fp8 vs bf16-dequantised] %d rows: max|diff| %.3g, max|diff|/max|logit| per row %.3g "
      "(bound %.3g), rms rel %.3g, argmax checked %d, mismatches %d\n",
      rows, worst_abs, worst, bound, std::sqrt(sum_sq / sum_ref_sq), argmax_rows, argmax_mismatch);
  EXPECT_LE(worst, bound);
  EXPECT_GT(worst, 0.0);  // the variants really differ
  EXPECT_EQ(argmax_mismatch, 0);
}

TEST(Fp8Model, MtpEqualsPlainForEveryK) {
  auto model = load("fp8");
  ASSERT_TRUE(model->has_mtp());
  const std::vector<int32_t> prompt = prompts().back();
  constexpr int kTokens = 48;
  Generator plain(*model, nullptr, GeneratorOptions{.max_context = 512});
  const auto ref = plain.generate(GenerateRequest{.prompt = prompt, .max_tokens = kTokens}).tokens;
  ASSERT_EQ(ref.size(), static_cast<size_t>(kTokens));
  for (int k = 1; k <= 8; ++k) {
    Generator gen(*model, std::make_unique<MtpDrafter>(*model),
                  GeneratorOptions{.num_speculative_tokens = k, .max_context = 512});
    const auto r = gen.generate(GenerateRequest{.prompt = prompt, .max_tokens = kTokens});
    EXPECT_EQ(r.tokens, ref) << "mtp k=" << k;
    std::printf("[fp8 mtp] k=%d: mean acceptance length %.2f, tokens equal plain: %s\n", k,
                r.stats.mean_acceptance_length(), r.tokens == ref ? "yes" : "no");
  }
}

// Released checkpoints may store the scales in bf16 (Qwen3 -FP8 do): accepted, widened exactly.
// Rounding a scale to bf16 moves each dequantised weight of its block by at most 2^-9 of itself,
// so the logits stay within the bound of the bf16 test above.
TEST(Fp8Model, Bf16ScalesLoadAndStayWithinTheirRounding) {
  const fs::path dir =
      fs::temp_directory_path() / ("tandem_fp8_bf16_scales_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fixtures() / "fp8/config.json", dir / "config.json");
  {
    const Checkpoint ck = Checkpoint::open((fixtures() / "fp8").string());
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& n : ck.names()) {
      Tensor t = ck.get(n);
      if (n.ends_with("_scale_inv")) t = testing::to_bf16(t.to_f32());
      tensors.emplace_back(n, t);
    }
    testing::write_safetensors((dir / "model.safetensors").string(), tensors);
  }
  auto bf16_scales = testing::load_model_dir(dir.string());
  auto fp8 = load("fp8");
  const std::vector<int32_t> ids = prompts().back();
  Generator a(*fp8, nullptr, GeneratorOptions{.max_context = 512});
  Generator b(*bf16_scales, nullptr, GeneratorOptions{.max_context = 512});
  const Tensor la = a.score(ids), lb = b.score(ids);
  double worst = 0;
  for (int64_t t = 0; t < la.dim(0); ++t) {
    double err = 0, ref = 0;
    for (int64_t i = 0; i < la.dim(1); ++i) {
      const float x = la.data<const float>()[t * la.dim(1) + i],
                  y = lb.data<const float>()[t * la.dim(1) + i];
      err = std::max(err, std::fabs(static_cast<double>(x) - y));
      ref = std::max(ref, std::fabs(static_cast<double>(x)));
    }
    worst = std::max(worst, err / ref);
  }
  std::printf("[fp8 bf16 scales] max|diff|/max|logit| per row %.3g\n", worst);
  EXPECT_LE(worst, 32 * std::ldexp(1.0, -9));
  fs::remove_all(dir);
}

// ---- refusals through the binary ----

using testing::run_tandem;
using testing::RunResult;

// A scratch FP8 checkpoint whose config.json or safetensors header a test edits.
class BrokenFp8 : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem_fp8_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(fixtures() / "fp8/config.json", dir_ / "config.json");
    fs::create_symlink(fixtures() / "fp8/model.safetensors", dir_ / "model.safetensors");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void edit_quantization(const std::function<void(nlohmann::json&)>& edit) {
    auto c = testing::read_json((dir_ / "config.json").string());
    edit(c["quantization_config"]);
    std::ofstream(dir_ / "config.json") << c.dump(2);
  }
  // Rewrites the header (the data section is copied as is, offsets unchanged).
  void edit_header(const std::function<void(nlohmann::json&)>& edit) {
    std::ifstream in(fixtures() / "fp8/model.safetensors", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    uint64_t len = 0;
    std::memcpy(&len, bytes.data(), 8);
    auto header = nlohmann::json::parse(bytes.substr(8, len));
    edit(header);
    const std::string h = header.dump();
    const uint64_t n = h.size();
    fs::remove(dir_ / "model.safetensors");
    std::ofstream out(dir_ / "model.safetensors", std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h << bytes.substr(8 + len);
  }
  void expect_refused(const std::string& needle) {
    const RunResult r = run_tandem("generate --model " + dir_.string() +
                                   " --prompt-ids 1,2,3 --max-tokens 2 --threads 1");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos)
        << "expected '" << needle << "' in: " << r.output;
  }

  fs::path dir_;
};

TEST_F(BrokenFp8, TheUneditedCheckpointRuns) {
  const RunResult r = run_tandem("generate --model " + dir_.string() +
                                 " --prompt-ids 1,2,3 --max-tokens 2 --threads 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("weights: fp8 e4m3, 128x128 block scales"), std::string::npos)
      << r.output;
}

TEST_F(BrokenFp8, OtherQuantMethod) {
  edit_quantization([](nlohmann::json& q) { q["quant_method"] = "awq"; });
  expect_refused("quantization_config: quant_method 'awq' is not supported");
}

TEST_F(BrokenFp8, OtherFmt) {
  edit_quantization([](nlohmann::json& q) { q["fmt"] = "e5m2"; });
  expect_refused("quantization_config: fmt 'e5m2' is not supported (supported: 'e4m3')");
}

TEST_F(BrokenFp8, OtherBlockSize) {
  edit_quantization([](nlohmann::json& q) { q["weight_block_size"] = {64, 64}; });
  expect_refused("quantization_config: weight_block_size [64,64] is not supported");
}

TEST_F(BrokenFp8, PerTensorScales) {
  edit_quantization([](nlohmann::json& q) { q.erase("weight_block_size"); });
  expect_refused("no weight_block_size: per-tensor FP8 is not supported");
}

TEST_F(BrokenFp8, StaticActivations) {
  edit_quantization([](nlohmann::json& q) { q["activation_scheme"] = "static"; });
  expect_refused("activation_scheme 'static' is not supported");
}

TEST_F(BrokenFp8, NoQuantizationConfig) {
  auto c = testing::read_json((dir_ / "config.json").string());
  c.erase("quantization_config");
  std::ofstream(dir_ / "config.json") << c.dump(2);
  expect_refused(
      "tensor 'model.layers.0.linear_attn.in_proj_qkv.weight' is F8_E4M3 but "
      "config.json has no quantization_config");
}

TEST_F(BrokenFp8, MissingScale) {
  edit_header([](nlohmann::json& h) { h.erase("model.layers.2.mlp.up_proj.weight_scale_inv"); });
  expect_refused(
      "FP8 weight 'model.layers.2.mlp.up_proj.weight' [832, 320] has no scale tensor "
      "'model.layers.2.mlp.up_proj.weight_scale_inv' (f32 [7, 3]");
}

TEST_F(BrokenFp8, MisShapedScale) {
  edit_header([](nlohmann::json& h) {
    h["model.layers.0.mlp.down_proj.weight_scale_inv"]["shape"] = {7, 3};
  });
  expect_refused(
      "scale tensor 'model.layers.0.mlp.down_proj.weight_scale_inv' has shape [7, 3], "
      "expected [3, 7] for weight 'model.layers.0.mlp.down_proj.weight' [320, 832]");
}

TEST_F(BrokenFp8, Fp8ModuleListedAsKeptInBf16) {
  edit_quantization([](nlohmann::json& q) {
    q["modules_to_not_convert"].push_back("model.layers.3.self_attn.o_proj");
  });
  expect_refused(
      "tensor 'model.layers.3.self_attn.o_proj.weight' is F8_E4M3 but "
      "quantization_config.modules_to_not_convert lists "
      "'model.layers.3.self_attn.o_proj'");
}

TEST_F(BrokenFp8, ModulesToNotConvertMatchWholeNameComponents) {
  edit_quantization([](nlohmann::json& q) { q["modules_to_not_convert"].push_back("mlp.gate"); });
  const RunResult r = run_tandem("generate --model " + dir_.string() +
                                 " --prompt-ids 1,2,3 --max-tokens 2 --threads 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;  // a MoE router's name is not a prefix of gate_proj's
  edit_quantization([](nlohmann::json& q) { q["modules_to_not_convert"].push_back("down_proj"); });
  expect_refused(
      "tensor 'model.layers.0.mlp.down_proj.weight' is F8_E4M3 but "
      "quantization_config.modules_to_not_convert lists 'down_proj'");
}

TEST_F(BrokenFp8, Fp8Norm) {  // only linear weights may be FP8
  edit_header([](nlohmann::json& h) {
    auto& e = h["model.norm.weight"];
    e["dtype"] = "F8_E4M3";
    e["data_offsets"][1] = e["data_offsets"][0].get<int64_t>() + 320;  // [320] of 1 byte
  });
  expect_refused("tensor 'model.norm.weight' is F8_E4M3, but only linear-layer weights may be FP8");
}

}  // namespace
}  // namespace tandem
