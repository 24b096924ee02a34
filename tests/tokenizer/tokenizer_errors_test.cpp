// Loading errors are user errors with a message that names the problem: missing files, and
// tokenizer.json features outside byte-level BPE (model type, normaliser, pre-tokeniser, decoder).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/tokenizer/test_util.h"

namespace tandem::tok {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A tiny valid byte-level BPE tokenizer.json with all 256 bytes and one merge.
nlohmann::json tiny_tokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  const auto full =
      nlohmann::json::parse(testing::read_text(testing::fixture("qwen3/tokenizer.json")));
  for (auto it = full["model"]["vocab"].begin(); it != full["model"]["vocab"].end(); ++it) {
    if (it.value().get<int>() < 256) vocab[it.key()] = it.value();
  }
  vocab["ab"] = 256;
  nlohmann::json t = full;
  t["model"]["vocab"] = vocab;
  t["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "b"})});
  t["added_tokens"] = nlohmann::json::array();
  return t;
}

TEST(TokenizerErrors, TinyTokenizerWorks) {
  auto t = Tokenizer::from_json(tiny_tokenizer().dump());
  EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{256}));
  EXPECT_EQ(t.decode(t.encode("xaby")), "xaby");
}

TEST(TokenizerErrors, UnsupportedModelType) {
  auto j = tiny_tokenizer();
  j["model"]["type"] = "WordPiece";
  std::string msg = error_of([&] { Tokenizer::from_json(j.dump()); });
  EXPECT_NE(msg.find("unsupported tokenizer model type 'WordPiece'"), std::string::npos) << msg;
}

TEST(TokenizerErrors, UnsupportedNormalizerAndPreTokenizer) {
  auto j = tiny_tokenizer();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("normalizer 'Lowercase'"),
            std::string::npos);
  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("pre-tokenizer 'Whitespace'"),
            std::string::npos);
  j = tiny_tokenizer();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump()); }).find("decoder 'WordPiece'"),
            std::string::npos);
}

TEST(TokenizerErrors, MissingFilesAndBadJson) {
  EXPECT_NE(error_of([] { Tokenizer::from_dir("/nonexistent/model"); }).find("does not exist"),
            std::string::npos);
  auto dir = std::filesystem::temp_directory_path() / "tandem_tok_missing";
  std::filesystem::create_directories(dir);
  EXPECT_NE(error_of([&] { Tokenizer::from_dir(dir.string()); }).find("no tokenizer.json"),
            std::string::npos);
  std::ofstream(dir / "tokenizer.json") << "{ not json";
  EXPECT_NE(error_of([&] { Tokenizer::from_dir(dir.string()); }).find("not valid JSON"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::tok
