// Streaming detokenisation properties: on seeded random id sequences (biased towards ids whose
// bytes split multi-byte characters) every piece is valid UTF-8 and the pieces concatenate to
// the full decode.
#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/tokenizer/test_util.h"
#include "tokenizer/utf8.h"

namespace tandem::tok {
namespace {

using testing::qwen3;

std::string stream_all(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip,
                       bool* all_valid) {
  StreamDecoder d(t, skip);
  std::string out;
  *all_valid = true;
  for (int32_t id : ids) {
    std::string piece = d.push(id);
    *all_valid = *all_valid && is_valid_utf8(piece);
    out += piece;
  }
  std::string tail = d.flush();
  *all_valid = *all_valid && is_valid_utf8(tail);
  return out + tail;
}

TEST(StreamDecoder, RandomSequencesConcatenateToFullDecode) {
  const auto& t = qwen3();
  // Ids whose bytes are not valid UTF-8 on their own: partial characters.
  std::vector<int32_t> partial;
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    if (!is_valid_utf8(t.token_bytes(id))) partial.push_back(id);
  }
  ASSERT_GT(partial.size(), 1000u);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any(0, t.vocab_size() - 1);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 24);
    for (auto& id : ids) id = (rng() % 2) ? partial[rng() % partial.size()] : any(rng);
    bool skip = trial % 3 == 0, valid = false;
    std::string streamed = stream_all(t, ids, skip, &valid);
    ASSERT_EQ(streamed, t.decode(ids, skip)) << "trial " << trial;
    ASSERT_TRUE(valid) << "trial " << trial;
  }
}

TEST(StreamDecoder, HoldsSplitCharactersUntilComplete) {
  const auto& t = qwen3();
  std::vector<int32_t> ids = t.encode("日本語🙂👨‍👩‍👧 ok");
  bool valid = false;
  EXPECT_EQ(stream_all(t, ids, false, &valid), "日本語🙂👨‍👩‍👧 ok");
  EXPECT_TRUE(valid);
  // Feed the four bytes of U+1F642 as four single-byte tokens: nothing until the last one.
  StreamDecoder d(t);
  std::string emoji = "\xF0\x9F\x99\x82";
  for (size_t i = 0; i < emoji.size(); ++i) {
    int32_t id = -1;
    for (int32_t k = 0; k < 512 && id < 0; ++k) {
      if (t.token_bytes(k) == emoji.substr(i, 1)) id = k;
    }
    ASSERT_GE(id, 0);
    std::string piece = d.push(id);
    EXPECT_EQ(piece, i + 1 == emoji.size() ? emoji : "") << i;
  }
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, IncompleteTailAtEndBecomesReplacement) {
  const auto& t = qwen3();
  int32_t lead = -1;
  for (int32_t k = 0; k < 512 && lead < 0; ++k) {
    if (t.token_bytes(k) == "\xE6") lead = k;
  }
  ASSERT_GE(lead, 0);
  StreamDecoder d(t);
  EXPECT_EQ(d.push(lead), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace tandem::tok
