// The real binary on user errors: each gives a clear message naming the file, field, tensor or
// value, and a non-zero exit code, never a crash. Broken checkpoints are made from tiny-text.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/safetensors.h"
#include "test_support.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

using testing::run_tandem;
using testing::RunResult;

// A scratch copy of tiny-text that a test may break.
class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem_e2e_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(testing::fixture_dir("tiny-text") + "/" + f, dir_ / f);
  }
  void TearDown() override { fs::remove_all(dir_); }

  nlohmann::json config() { return testing::read_json((dir_ / "config.json").string()); }
  void write_config(const nlohmann::json& j) { std::ofstream(dir_ / "config.json") << j.dump(2); }
  // Rewrites model.safetensors keeping only tensors for which keep(name) is true.
  void rewrite_weights(const std::function<bool(const std::string&)>& keep) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    {
      Checkpoint ck = Checkpoint::open(dir_.string());
      for (const auto& n : ck.names())
        if (keep(n)) tensors.emplace_back(n, ck.get(n).to(Device::kCpu));
    }
    testing::write_safetensors((dir_ / "model.safetensors").string(), tensors);
  }
  std::string generate_args(const std::string& extra = "") {
    return "generate --model " + dir_.string() + " --prompt-ids 1,2,3 --max-tokens 4 " + extra;
  }

  fs::path dir_;
};

void expect_error(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos)
      << "expected '" << needle << "' in: " << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

TEST_F(BrokenCheckpoint, MissingDirectory) {
  expect_error(run_tandem("generate --model /nonexistent/model --prompt-ids 1"),
               "model directory '/nonexistent/model' does not exist");
}

TEST_F(BrokenCheckpoint, MissingConfig) {
  fs::remove(dir_ / "config.json");
  expect_error(run_tandem(generate_args()), "config.json");
}

TEST_F(BrokenCheckpoint, InvalidJsonConfig) {
  std::ofstream(dir_ / "config.json") << "{ not json";
  expect_error(run_tandem(generate_args()), "invalid JSON");
}

TEST_F(BrokenCheckpoint, InvalidGenerationConfig) {
  std::ofstream(dir_ / "generation_config.json") << "{ \"eos_token_id\": [1,";
  expect_error(run_tandem(generate_args()), "generation_config.json: invalid JSON");
}

// generation_config.json's end tokens join config.json's (a chat model's end of turn).
TEST_F(BrokenCheckpoint, GenerationConfigEndTokensJoinConfigs) {
  auto c = config();
  c["eos_token_id"] = 3;
  write_config(c);
  std::ofstream(dir_ / "generation_config.json") << R"({"eos_token_id": [3, 5, 7]})";
  EXPECT_EQ(ModelConfig::from_dir(dir_.string()).eos_token_ids, (std::vector<int32_t>{3, 5, 7}));
  std::ofstream(dir_ / "generation_config.json") << R"({"eos_token_id": 9, "do_sample": false})";
  EXPECT_EQ(ModelConfig::from_dir(dir_.string()).eos_token_ids, (std::vector<int32_t>{3, 9}));
}

TEST_F(BrokenCheckpoint, UnknownModelType) {
  auto c = config();
  c["model_type"] = "llama";
  write_config(c);
  expect_error(run_tandem(generate_args()), "unsupported model_type 'llama'");
}

TEST_F(BrokenCheckpoint, MissingConfigField) {
  auto c = config();
  c.erase("hidden_size");
  write_config(c);
  expect_error(run_tandem(generate_args()), "missing required field 'hidden_size'");
}

TEST_F(BrokenCheckpoint, MisShapedTensor) {
  auto c = config();
  c["intermediate_size"] = 130;
  write_config(c);
  expect_error(
      run_tandem(generate_args()),
      "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64], expected [130, 64]");
}

TEST_F(BrokenCheckpoint, MissingTensor) {
  rewrite_weights([](const std::string& n) { return n != "model.norm.weight"; });
  expect_error(run_tandem(generate_args()), "has no tensor 'model.norm.weight'");
}

TEST_F(BrokenCheckpoint, TruncatedFile) {
  fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") - 1000);
  expect_error(run_tandem(generate_args()), "is truncated");
}

TEST_F(BrokenCheckpoint, NoSafetensors) {
  fs::remove(dir_ / "model.safetensors");
  expect_error(run_tandem(generate_args()), "no model.safetensors");
}

TEST_F(BrokenCheckpoint, MtpRequestedWithoutMtpTensors) {
  rewrite_weights([](const std::string& n) { return n.rfind("mtp.", 0) != 0; });
  expect_error(run_tandem(generate_args("--speculative mtp --num-speculative-tokens 2")),
               "has none; use --speculative none");
  EXPECT_EQ(run_tandem(generate_args()).exit_code, 0);  // plain decoding still works
}

TEST(CliErrors, BadPromptIdsAndLimits) {
  const std::string model = "--model " + testing::fixture_dir("tiny-text");
  expect_error(run_tandem("generate " + model + " --prompt-ids 1,x,3"),
               "'x' is not a non-negative token id");
  expect_error(run_tandem("generate " + model + " --prompt-ids 1,99999"), "outside the vocabulary");
  expect_error(
      run_tandem("generate " + model + " --prompt-ids 1,2,3,4,5,6,7,8,9,10 --max-context 8"),
      "the prompt has 10 tokens but the model length is 8");
  expect_error(run_tandem("generate " + model +
                          " --prompt-ids 1 --speculative mtp --num-speculative-tokens 9"),
               "--num-speculative-tokens must be in [1, 8]");
  expect_error(run_tandem("generate " + model + " --prompt-ids 1 --top-p 0"),
               "top_p must be in (0, 1]");
  expect_error(run_tandem("generate " + model + " --prompt-ids 1 --speculative bogus"),
               "--speculative must be");
  expect_error(run_tandem("generate " + model + " --prompt-ids 1 --device tpu"),
               "unknown device 'tpu'");
  if (!cuda_available())
    expect_error(run_tandem("generate " + model + " --prompt-ids 1 --device cuda"), "cuda");
  EXPECT_NE(run_tandem("generate --prompt-ids 1").exit_code, 0);  // --model is required
  const RunResult fp8 = run_tandem("generate " + model + " --prompt-ids 1 --fp8-prefill bogus");
  EXPECT_NE(fp8.exit_code, 0);  // a usage error: CLI11's code
  EXPECT_NE(fp8.output.find("--fp8-prefill: bogus not in {tensor-cores,dequantize}"),
            std::string::npos)
      << fp8.output;
}

TEST(CliErrors, BatchModeAndEngineLimits) {
  const std::string model = "generate --model " + testing::fixture_dir("tiny-text");
  const fs::path dir = fs::temp_directory_path() / ("tandem_batch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto file = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  expect_error(run_tandem(model + " --prompts " + (dir / "missing.jsonl").string()),
               "cannot read --prompts file");
  expect_error(
      run_tandem(model + " --prompts " + file("bad.jsonl", "{\"prompt_ids\": [1]}\n{oops\n")),
      "--prompts line 2: not valid JSON");
  expect_error(run_tandem(model + " --prompts " +
                          file("both.jsonl", "{\"prompt\": \"a\", \"prompt_ids\": [1]}\n")),
               "--prompts line 1: give exactly one of prompt, prompt_ids");
  expect_error(run_tandem(model + " --prompts " +
                          file("type.jsonl", "{\"prompt_ids\": [1], \"max_tokens\": \"x\"}\n")),
               "--prompts line 1: field 'max_tokens' has the wrong type");
  expect_error(run_tandem(model + " --prompts " +
                          file("range.jsonl", "{\"prompt_ids\": [1], \"top_p\": 2}\n")),
               "--prompts line 1: top_p must be in (0, 1]");
  expect_error(run_tandem(model + " --prompts " + file("oov.jsonl", "{\"prompt_ids\": [99999]}\n")),
               "outside the vocabulary");
  expect_error(run_tandem(model + " --prompts " + file("empty.jsonl", "\n")), "holds no request");
  expect_error(run_tandem(model + " --prompt-ids 1 --max-num-batched-tokens 100"),
               "--max-num-batched-tokens must be a positive multiple of 64");
  expect_error(
      run_tandem(model + " --prompt-ids 1 --max-num-seqs 200 --max-num-batched-tokens 128"),
      "exceed --max-num-batched-tokens 128");
  expect_error(run_tandem(model + " --prompt-ids 1 --kv-blocks 2 --max-model-len 1024"),
               "--kv-blocks 2 cannot hold one sequence of --max-model-len 1024");
  expect_error(run_tandem(model + " --prompt-ids 1 --gpu-memory-utilization 1.5"),
               "--gpu-memory-utilization must be in (0, 1]");
  fs::remove_all(dir);
}

TEST(CliErrors, SpeculativeTokenMap) {
  const std::string model = "generate --model " + testing::fixture_dir("tandem-tiny-qwen35") +
                            " --prompt-ids 1,2 --max-tokens 2 ";
  const fs::path dir = fs::temp_directory_path() / ("tandem_map_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto file = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  const std::string mtp = model + "--speculative mtp --speculative-token-map ";
  expect_error(run_tandem(mtp + (dir / "missing.json").string()), "cannot read");
  expect_error(run_tandem(mtp + file("bad.json", "[1, 2,")), "is not valid JSON");
  expect_error(run_tandem(mtp + file("object.json", "{\"ids\": [1]}")),
               "expected a non-empty JSON array of token ids");
  expect_error(run_tandem(mtp + file("empty.json", "[]")),
               "expected a non-empty JSON array of token ids");
  expect_error(run_tandem(mtp + file("neg.json", "[1, -3]")), "-3 is not a token id");
  expect_error(run_tandem(mtp + file("oov.json", "[1, 99999]")),
               "token id 99999 is outside the vocabulary");
  expect_error(run_tandem(mtp + file("dup.json", "[4, 1, 4]")), "token id 4 appears twice");
  expect_error(run_tandem(model + "--speculative-token-map " + file("ok.json", "[1, 2]")),
               "--speculative-token-map needs --speculative mtp");
  fs::remove_all(dir);
}

TEST(CliErrors, BenchOptions) {
  const std::string model = "bench --model " + testing::fixture_dir("tiny-text");
  expect_error(run_tandem(model + " --linear-variant 3"), "--linear-variant needs --device cuda");
  expect_error(run_tandem(model + " --num-speculative-tokens 0"),
               "--num-speculative-tokens must be in [1, 8]");
  expect_error(run_tandem(model + " --draft-vocab-size 99999"),
               "--draft-vocab-size must be in [0, ");
  expect_error(run_tandem(model + " --mixed-prefill-tokens -1"),
               "--mixed-prefill-tokens must be >= 0");
  expect_error(run_tandem(model + " --peak-bandwidth -1"),
               "--peak-bandwidth and --peak-tflops must not be negative");
}

}  // namespace
}  // namespace tandem
