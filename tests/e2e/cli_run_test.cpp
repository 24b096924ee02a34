// The real binary on the happy path: score writes the logits .npy, generate --json reports the
// documented stats, --spec-trace writes one JSON line per step with the documented keys, diverge
// reports "identical", and the offline batch mode (--prompts) answers every line in input order
// with what a single-prompt run gives.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/npy.h"
#include "test_support.h"

namespace tandem {
namespace {

std::pair<int, std::string> run(const std::string& args) {
  FILE* p = popen((std::string(TANDEM_BINARY) + " " + args + " 2>/dev/null").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

const std::string kModel = "--model " + testing::fixture_dir("small") + " --threads 1";

TEST(CliRun, ScoreWritesLogitsNpy) {
  const std::string out = (std::filesystem::temp_directory_path() / "tandem_score.npy").string();
  auto [code, text] = run("score " + kModel + " --prompt-ids 1,2,3,4 --out " + out);
  ASSERT_EQ(code, 0) << text;
  const Tensor t = read_npy(out);
  EXPECT_EQ(t.shape(), (Shape{4, 2048}));
  std::filesystem::remove(out);
}

TEST(CliRun, GenerateJsonStatsAndSpecTrace) {
  const std::string trace =
      (std::filesystem::temp_directory_path() / "tandem_trace.jsonl").string();
  auto [code, text] =
      run("generate " + kModel +
          " --prompt-ids 5,6,7 --max-tokens 20 --json --ignore-eos --speculative oracle"
          " --oracle-pattern first:1 --num-speculative-tokens 3 --spec-trace " +
          trace);
  ASSERT_EQ(code, 0) << text;
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["tokens"].size(), 20u);
  for (const char* key : {"prompt_tokens", "generated_tokens", "prefill_tokens_per_second",
                          "decode_tokens_per_second", "mean_acceptance_length",
                          "per_position_acceptance", "draft_tokens", "accepted_tokens"})
    EXPECT_TRUE(j["stats"].contains(key)) << key;
  EXPECT_DOUBLE_EQ(j["stats"]["mean_acceptance_length"].get<double>(), 2.0);  // first:1 accepts one
  EXPECT_EQ(j["stats"]["per_position_acceptance"].size(), 3u);
  std::ifstream in(trace);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    const auto step = nlohmann::json::parse(line);
    for (const char* key : {"step", "position", "drafts", "target", "n_acc"})
      EXPECT_TRUE(step.contains(key)) << key;
    EXPECT_EQ(step["n_acc"].get<int>(), 2);
  }
  EXPECT_GT(lines, 0);
  std::filesystem::remove(trace);
}

// tandem bench on the CPU: the JSON's documented per-batch entries, and with
// --mixed-prefill-tokens each batch's decode step timed with a prefill chunk in it, which costs
// more than the step without it.
TEST(CliRun, BenchJsonWithMixedSteps) {
  const std::string out = (std::filesystem::temp_directory_path() / "tandem_bench.json").string();
  auto [code, text] = run("bench " + kModel +
                          " --context 64 --batch 1,2 --num-speculative-tokens 1 --steps 2"
                          " --mixed-prefill-tokens 48 --json " +
                          out);
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("mixed step, context 64, batch 2"), std::string::npos) << text;
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["results"].size(), 2u);
  for (const auto& r : j["results"]) {
    for (const char* key : {"decode", "decode_ms", "verify", "mixed_step"})
      EXPECT_TRUE(r.contains(key)) << key;
    const auto& m = r["mixed_step"];
    EXPECT_EQ(m["prefill_chunk_tokens"], 48);
    EXPECT_GT(m["decode_with_chunk_ms"].get<double>(), m["decode_eager_ms"].get<double>());
    EXPECT_GT(m["chunk_tokens_per_second"].get<double>(), 0.0);
  }
  std::filesystem::remove(out);
}

// --peak-bandwidth / --peak-tflops replace the device's bounds (hardware_bounds): the JSON says
// which, and each step's memory bound scales with them (the bytes are the same).
TEST(CliRun, BenchBoundsGivenOnTheCommandLine) {
  const std::string out = (std::filesystem::temp_directory_path() / "tandem_bench_b.json").string();
  const std::string args = "bench " + kModel +
                           " --context 64 --batch 1 --speculative none --steps 1"
                           " --num-speculative-tokens 1 --json " +
                           out;
  const auto bounds = [&](const std::string& extra) {
    auto [code, text] = run(args + extra);
    EXPECT_EQ(code, 0) << text;
    std::ifstream in(out);
    return nlohmann::json::parse(in);
  };
  const nlohmann::json base = bounds("");
  EXPECT_DOUBLE_EQ(base["peak_bytes_per_second"].get<double>(), 4.3e12);
  EXPECT_NE(base["bounds_basis"].get<std::string>().find("no bounds known"), std::string::npos);
  const nlohmann::json given = bounds(" --peak-bandwidth 2.15 --peak-tflops 395");
  EXPECT_DOUBLE_EQ(given["peak_bytes_per_second"].get<double>(), 2.15e12);
  EXPECT_DOUBLE_EQ(given["peak_flops"].get<double>(), 395e12);
  EXPECT_NE(given["bounds_basis"].get<std::string>().find("given"), std::string::npos);
  const auto decode = [](const nlohmann::json& j) { return j["results"][0]["decode"]; };
  EXPECT_NEAR(decode(given)["memory_bound_ms"].get<double>(),
              2 * decode(base)["memory_bound_ms"].get<double>(),
              1e-9 * decode(base)["memory_bound_ms"].get<double>());
  EXPECT_NEAR(decode(given)["tensor_bound_ms"].get<double>(),
              2 * decode(base)["tensor_bound_ms"].get<double>(),
              1e-9 * decode(base)["tensor_bound_ms"].get<double>());
  std::filesystem::remove(out);
}

// JSON mode in the offline batch mode ("json_object": true on a line), shipped model: a whole
// object when a stop token ended it, a JSON prefix otherwise; the same tokens with MTP.
TEST(CliRun, BatchModeJsonObjectLines) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string in = (dir / "tandem_json_prompts.jsonl").string();
  {
    std::ofstream f(in);
    for (const char* p : {"Describe ls as JSON.", "tar options, as a JSON object:"}) {
      f << nlohmann::json{{"prompt", p}, {"chat", true}, {"max_tokens", 40}, {"json_object", true}}
               .dump()
        << "\n";
    }
    f << nlohmann::json{{"prompt", "plain text"}, {"max_tokens", 6}}.dump() << "\n";
  }
  const std::string model =
      "--model " + testing::fixture_dir(testing::kTrainedModel) + " --threads 1 --prompts " + in;
  const auto results = [](const std::string& text) {
    std::vector<nlohmann::json> r;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line[0] == '{') r.push_back(nlohmann::json::parse(line));
    }
    return r;
  };
  auto [code, text] = run("generate " + model);
  ASSERT_EQ(code, 0) << text;
  const auto plain = results(text);
  ASSERT_EQ(plain.size(), 3u) << text;
  for (int i = 0; i < 2; ++i) {
    const std::string answer = plain[i]["text"].get<std::string>();
    if (plain[i]["finish_reason"] == "stop") {
      EXPECT_TRUE(nlohmann::json::parse(answer).is_object()) << answer;
    } else {
      EXPECT_EQ(answer.rfind("{", 0), 0u) << answer;
    }
  }
  auto [mcode, mtext] = run("generate " + model + " --speculative mtp --num-speculative-tokens 3");
  ASSERT_EQ(mcode, 0) << mtext;
  const auto spec = results(mtext);
  ASSERT_EQ(spec.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(spec[i]["tokens"], plain[i]["tokens"]) << i;
  std::filesystem::remove(in);
}

TEST(CliRun, DivergeReportsIdentical) {
  auto [code, text] = run("diverge " + kModel +
                          " --prompt-ids 9,8,7 --max-tokens 16 --speculative mtp "
                          "--num-speculative-tokens 3");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(text, "identical\n");
}

TEST(CliRun, BatchModeAnswersInOrderWithTheSoloOutputs) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string in = (dir / "tandem_prompts.jsonl").string();
  const std::string out = (dir / "tandem_results.jsonl").string();
  const std::vector<std::vector<int32_t>> prompts{
      {5, 6, 7}, {1}, {9, 8, 7, 6, 5, 4, 3, 2, 1}, {100, 200, 300}, {42, 42}, {7, 1, 7, 1}};
  {
    std::ofstream f(in);
    for (size_t i = 0; i < prompts.size(); ++i) {
      f << nlohmann::json{{"prompt_ids", prompts[i]}, {"max_tokens", 10 + 3 * i}, {"id", i * 10}}
               .dump()
        << "\n";
    }
  }
  auto [code, text] = run("generate " + kModel + " --prompts " + in + " --output " + out +
                          " --ignore-eos --speculative mtp --num-speculative-tokens 2"
                          " --max-num-seqs 4");
  ASSERT_EQ(code, 0) << text;
  std::ifstream res(out);
  size_t i = 0;
  for (std::string line; std::getline(res, line); ++i) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_LT(i, prompts.size());
    EXPECT_EQ(j["index"].get<size_t>(), i);
    EXPECT_EQ(j["id"].get<size_t>(), i * 10);
    EXPECT_EQ(j["tokens"].size(), 10 + 3 * i);
    std::string ids;
    for (int32_t t : prompts[i]) ids.append(std::to_string(t)).append(",");
    ids.pop_back();
    auto [c1, solo] = run("generate " + kModel + " --prompt-ids " + ids + " --json --ignore-eos" +
                          " --max-tokens " + std::to_string(10 + 3 * i));
    ASSERT_EQ(c1, 0);
    EXPECT_EQ(j["tokens"], nlohmann::json::parse(solo)["tokens"]) << "prompt " << i;
  }
  EXPECT_EQ(i, prompts.size());
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

TEST(CliRun, HelpDocumentsEveryFlag) {
  auto [code, text] = run("generate --help");
  EXPECT_EQ(code, 0);
  for (const char* flag : {"--model",
                           "--prompt-ids",
                           "--max-tokens",
                           "--json",
                           "--threads",
                           "--device",
                           "--speculative",
                           "--num-speculative-tokens",
                           "--temperature",
                           "--top-k",
                           "--top-p",
                           "--seed",
                           "--spec-trace",
                           "--no-cuda-graphs",
                           "--no-pdl",
                           "--fp8-prefill",
                           "--prompts",
                           "--output",
                           "--max-num-seqs",
                           "--max-num-batched-tokens",
                           "--max-model-len",
                           "--kv-blocks",
                           "--gpu-memory-utilization"})
    EXPECT_NE(text.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace tandem
