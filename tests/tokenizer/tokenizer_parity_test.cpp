// Parity with HF `tokenizers` on the real Qwen3 tokenizer.json: every golden string must encode to
// exactly the committed ids and decode back to HF's decode. Goldens come from
// tools/tokenizer/make_encode_goldens.py; this test needs no Python.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/tokenizer/test_util.h"

namespace tandem::tok {
namespace {

using testing::fixture;
using testing::qwen3;

TEST(TokenizerParity, Qwen3GoldensIdenticalIdsAndDecode) {
  std::ifstream f(fixture("qwen3/encode_goldens.jsonl"));
  ASSERT_TRUE(f.good());
  std::string line;
  std::getline(f, line);
  auto meta = nlohmann::json::parse(line).at("meta");
  size_t n = 0, id_mismatch = 0, decode_mismatch = 0;
  while (std::getline(f, line)) {
    auto g = nlohmann::json::parse(line);
    auto text = g["text"].get<std::string>();
    auto want = g["ids"].get<std::vector<int32_t>>();
    auto got = qwen3().encode(text);
    ++n;
    if (got != want) {
      if (++id_mismatch <= 10) {
        ADD_FAILURE() << "ids differ for " << nlohmann::json(text).dump() << "\n  want "
                      << nlohmann::json(want).dump() << "\n  got  " << nlohmann::json(got).dump();
      }
      continue;
    }
    if (qwen3().decode(got) != g["decoded"].get<std::string>() && ++decode_mismatch <= 10) {
      ADD_FAILURE() << "decode differs for " << nlohmann::json(text).dump();
    }
  }
  EXPECT_EQ(n, meta["count"].get<size_t>());
  EXPECT_GE(n, 2000u);
  EXPECT_EQ(id_mismatch, 0u) << "of " << n;
  EXPECT_EQ(decode_mismatch, 0u) << "of " << n;
}

// Qwen3.5/3.6 pre-tokenizer regex ([\p{L}\p{M}]+ words) on the Qwen3 vocab: the PCRE2 port of
// the pattern must split exactly like HF's Oniguruma on the same strings.
TEST(TokenizerParity, Qwen35RegexGoldensIdenticalIds) {
  std::ifstream f(fixture("qwen3/qwen35_regex_goldens.jsonl"));
  ASSERT_TRUE(f.good());
  std::string line;
  std::getline(f, line);
  auto meta = nlohmann::json::parse(line).at("meta");
  auto spec = nlohmann::json::parse(testing::read_text(fixture("qwen3/tokenizer.json")));
  spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = meta["pre_tokenizer_regex"];
  const Tokenizer t = Tokenizer::from_json(spec.dump());
  size_t n = 0, mismatch = 0;
  while (std::getline(f, line)) {
    auto g = nlohmann::json::parse(line);
    auto text = g["text"].get<std::string>();
    ++n;
    if (t.encode(text) != g["ids"].get<std::vector<int32_t>>() && ++mismatch <= 10) {
      ADD_FAILURE() << "ids differ for " << nlohmann::json(text).dump();
    }
  }
  EXPECT_GE(n, 2000u);
  EXPECT_EQ(mismatch, 0u) << "of " << n;
}

// Added tokens with lstrip/rstrip (absorbing neighbouring whitespace), as HF does them.
TEST(TokenizerParity, AddedTokenStripGoldensIdenticalIds) {
  std::ifstream f(fixture("qwen3/strip_goldens.jsonl"));
  ASSERT_TRUE(f.good());
  std::string line;
  std::getline(f, line);
  auto meta = nlohmann::json::parse(line).at("meta");
  auto spec = nlohmann::json::parse(testing::read_text(fixture("qwen3/tokenizer.json")));
  auto listed = [](const nlohmann::json& list, const nlohmann::json& content) {
    return std::find(list.begin(), list.end(), content) != list.end();
  };
  for (auto& a : spec["added_tokens"]) {
    a["lstrip"] = listed(meta["lstrip"], a["content"]);
    a["rstrip"] = listed(meta["rstrip"], a["content"]);
  }
  const Tokenizer t = Tokenizer::from_json(spec.dump());
  size_t n = 0, mismatch = 0;
  while (std::getline(f, line)) {
    auto g = nlohmann::json::parse(line);
    auto text = g["text"].get<std::string>();
    ++n;
    auto got = t.encode(text);
    if (got != g["ids"].get<std::vector<int32_t>>() && ++mismatch <= 10) {
      ADD_FAILURE() << "ids differ for " << nlohmann::json(text).dump() << " got "
                    << nlohmann::json(got).dump() << " want " << g["ids"].dump();
    }
  }
  EXPECT_EQ(n, meta["count"].get<size_t>());
  EXPECT_EQ(mismatch, 0u) << "of " << n;
}

TEST(TokenizerParity, SpecialTokensMatchedAndSkippable) {
  const auto& t = qwen3();
  auto ids = t.encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), t.token_to_id("<|im_start|>"));
  EXPECT_EQ(ids.back(), t.token_to_id("<|im_end|>"));
  EXPECT_TRUE(t.is_special(ids.front()));
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "user\nhi");
  // <think> is an added but non-special token: kept by skip_special, like HF.
  auto think = t.encode("<think>x</think>");
  EXPECT_EQ(t.decode(think, true), "<think>x</think>");
}

TEST(TokenizerParity, EosAndTemplateFromConfigs) {
  const auto& t = qwen3();
  EXPECT_EQ(t.eos_ids(), (std::vector<int32_t>{151645, 151643}));
  ASSERT_TRUE(t.chat_template().has_value());
  EXPECT_NE(t.chat_template()->find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(t.eos_token().value_or(""), "<|im_end|>");
}

// One Tokenizer shared by several threads (the server's use): the word cache is shared, results
// must not depend on interleaving.
TEST(TokenizerParity, ConcurrentEncodeMatchesSerial) {
  const auto& t = qwen3();
  std::vector<std::string> texts;
  for (int k = 0; k < 200; ++k) {
    texts.push_back("thread test " + std::to_string(k * 7919) +
                    " 你好世界 naïve café 🙂 <|im_end|> " +
                    std::string(static_cast<size_t>(k % 13), 'x'));
  }
  std::vector<std::vector<int32_t>> serial;
  for (const auto& s : texts) serial.push_back(t.encode(s));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> pool;
  for (int w = 0; w < 4; ++w) {
    pool.emplace_back([&, w] {
      for (int rep = 0; rep < 5; ++rep) {
        for (size_t k = w; k < texts.size(); k += 1 + w) bad[w] += t.encode(texts[k]) != serial[k];
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

TEST(TokenizerParity, InvalidUtf8IsAnError) {
  EXPECT_THROW(qwen3().encode("bad \xC3\x28 byte"), tandem::Error);
}

TEST(TokenizerParity, DecodeIsLossyLikeHf) {
  const auto& t = qwen3();
  // A lone continuation byte token decodes to U+FFFD, unknown ids are dropped.
  int32_t lone = -1;
  for (int32_t id = 0; id < 300 && lone < 0; ++id) {
    if (t.token_bytes(id) == "\x80") lone = id;
  }
  ASSERT_GE(lone, 0);
  std::vector<int32_t> ids{lone, 9999999, -4};
  EXPECT_EQ(t.decode(ids), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace tandem::tok
