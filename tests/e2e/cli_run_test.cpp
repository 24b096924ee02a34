// The real binary on the happy path: score writes the logits .npy, generate --json reports the
// documented stats, --spec-trace writes one JSON line per step with the documented keys, and
// diverge reports "identical".
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

TEST(CliRun, DivergeReportsIdentical) {
  auto [code, text] = run("diverge " + kModel +
                          " --prompt-ids 9,8,7 --max-tokens 16 --speculative mtp "
                          "--num-speculative-tokens 3");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(text, "identical\n");
}

TEST(CliRun, HelpDocumentsEveryFlag) {
  auto [code, text] = run("generate --help");
  EXPECT_EQ(code, 0);
  for (const char* flag :
       {"--model", "--prompt-ids", "--max-tokens", "--json", "--threads", "--device",
        "--speculative", "--num-speculative-tokens", "--temperature", "--top-k", "--top-p",
        "--seed", "--spec-trace", "--no-cuda-graphs", "--no-pdl"})
    EXPECT_NE(text.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace tandem
