// The `tandem tokenize` and `tandem chat-template` commands run as a user would run them (the
// real binary, stdin/stdout); skipped when the binary has not been built.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/tokenizer/test_util.h"

namespace tandem::tok {
namespace {

std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(TANDEM_BINARY)) GTEST_SKIP() << "no binary at " << TANDEM_BINARY;
    // One folder per test: ctest runs the tests of this file in parallel processes.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() / (std::string("tandem_tok_cli_") + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string file(const std::string& name, const std::string& content) {
    auto p = (dir_ / name).string();
    std::ofstream(p) << content;
    return p;
  }
  std::filesystem::path dir_;
  const std::string model_ = testing::fixture("qwen3");
};

TEST_F(Cli, TokenizeAndDecodeRoundTrip) {
  int rc = 0;
  auto in = file("in.txt", "\"Hello, world! 你好\"\n\"<|im_start|>user\"\n");
  std::string ids =
      run(std::string(TANDEM_BINARY) + " tokenize --model " + model_ + " < " + in, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(ids, "[9707,11,1879,0,220,108386]\n[151644,872]\n");
  auto ids_file = file("ids.txt", ids);
  std::string text = run(
      std::string(TANDEM_BINARY) + " tokenize --decode --model " + model_ + " < " + ids_file, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(text, "\"Hello, world! 你好\"\n\"<|im_start|>user\"\n");
}

TEST_F(Cli, ChatTemplatePrintsPromptExactly) {
  int rc = 0;
  auto msgs = file("m.json", R"([{"role":"user","content":"hi"}])");
  std::string out =
      run(std::string(TANDEM_BINARY) + " chat-template --model " + model_ + " --messages " + msgs +
              " --add-generation-prompt --enable-thinking false",
          &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_F(Cli, BadInputIsExitOneWithMessage) {
  int rc = 0;
  auto in = file("bad.txt", "not json\n");
  run(std::string(TANDEM_BINARY) + " tokenize --model " + model_ + " < " + in + " 2>" +
          (dir_ / "err.txt").string(),
      &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(testing::read_text((dir_ / "err.txt").string()).find("line 1"), std::string::npos);
}

}  // namespace
}  // namespace tandem::tok
