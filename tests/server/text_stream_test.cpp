// Streaming text (server/text_stream.h): pieces never end inside a UTF-8 character, a stop string
// is never emitted even in part, and the pieces add up to the full decode cut before the first
// stop string, however the text is split into tokens.
#include "server/text_stream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "fake_codec.h"

namespace tandem::server {
namespace {

using testing::FakeCodec;

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

TEST(Utf8, SequenceLengthsAndTails) {
  EXPECT_EQ(utf8_sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_length("\xC3\xA9", 0), 2u);
  EXPECT_EQ(utf8_sequence_length("\xE2\x82\xAC", 0), 3u);
  EXPECT_EQ(utf8_sequence_length("\xF0\x9F\x98\x80", 0), 4u);
  EXPECT_EQ(utf8_sequence_length("\xC0\x80", 0), 0u);          // overlong
  EXPECT_EQ(utf8_sequence_length("\xED\xA0\x80", 0), 0u);      // surrogate
  EXPECT_EQ(utf8_sequence_length("\xF4\x90\x80\x80", 0), 0u);  // above U+10FFFF
  EXPECT_EQ(utf8_sequence_length("\xE2\x82", 0), 0u);          // truncated
  EXPECT_EQ(utf8_incomplete_tail("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xF0"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xF0\x9F\x98\x80"), 0u);  // complete
  EXPECT_EQ(utf8_incomplete_tail("ab\xE0\x80"), 0u);          // can never complete
  EXPECT_EQ(utf8_incomplete_tail("ab\x80"), 0u);              // a stray continuation
  EXPECT_EQ(utf8_lossy("a\xFF"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  // One U+FFFD per maximal ill-formed subpart (as Rust's from_utf8_lossy and HF decode).
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98z"), "\xEF\xBF\xBDz");
  EXPECT_EQ(utf8_lossy("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(StopMatcher, HoldsBackOnlyWhatCouldStartAStop) {
  StopMatcher m({"STOP", "\n\n"});
  EXPECT_EQ(m.push("hello S"), "hello ");
  EXPECT_EQ(m.push("T"), "");
  EXPECT_EQ(m.push("x"), "STx");  // not a stop after all: released at once
  EXPECT_EQ(m.push("a\n"), "a");
  EXPECT_EQ(m.push("b"), "\nb");
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.push("OP and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("later"), "");
  EXPECT_EQ(m.flush(), "");

  StopMatcher n({"abc"});
  EXPECT_EQ(n.push("xab"), "x");
  EXPECT_EQ(n.flush(), "ab");  // the end of generation releases a partial match
  StopMatcher none({});
  EXPECT_EQ(none.push("anything"), "anything");
}

TEST(StopMatcher, OverlappingStopsCutAtTheEarliest) {
  StopMatcher m({"bcd", "abcx", "c"});
  EXPECT_EQ(m.push("zab"), "z");  // "ab" could begin "abcx"
  EXPECT_EQ(m.push("cd"), "ab");  // "c" is completed first, though "bcd" begins earlier
  EXPECT_TRUE(m.stopped());
}

// Cuts text before the stop string completed first: the shortest prefix of text that ends with a
// stop string, cut before the longest stop string it ends with.
// include_stop: the text through the stop string that ends it (include_stop_str_in_output).
std::string expected_output(const std::string& text, const std::vector<std::string>& stops,
                            bool* stopped, bool include_stop = false) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t cut = std::string::npos;
    for (const auto& s : stops) {
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) {
        cut = std::min(cut, end - s.size());
      }
    }
    if (cut != std::string::npos) {
      *stopped = true;
      return text.substr(0, include_stop ? end : cut);
    }
  }
  *stopped = false;
  return text;
}

// Random texts and stop strings pushed in random pieces: whatever goes out is a prefix of the
// answer (without include_stop no stop string, not even its beginning, ever goes out), and the
// whole is the answer whatever the split.
void check_random_splits(uint32_t seed, bool include_stop) {
  std::mt19937 rng(seed);
  const std::string alphabet = "abcab \n";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    const int n_stops = static_cast<int>(rng() % 4);
    for (int s = 0; s < n_stops; ++s) {
      std::string stop;
      const int sl = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < sl; ++i) stop += alphabet[rng() % alphabet.size()];
      stops.push_back(stop);
    }
    bool should_stop = false;
    const std::string want = expected_output(text, stops, &should_stop, include_stop);
    StopMatcher m(stops, include_stop);
    std::string got;
    for (size_t pos = 0; pos < text.size() && !m.stopped();) {
      const size_t piece = 1 + rng() % 5;
      got += m.push(std::string_view(text).substr(pos, piece));
      pos += piece;
      ASSERT_EQ(want.compare(0, got.size(), got), 0)
          << "text '" << text << "' emitted '" << got << "' stops "
          << ::testing::PrintToString(stops);
    }
    got += m.flush();
    EXPECT_EQ(got, want) << "text '" << text << "'";
    EXPECT_EQ(m.stopped(), should_stop);
  }
}

TEST(StopMatcher, ArbitrarySplitsGiveTheSameTextAndNeverLeakAStop) {
  check_random_splits(7, false);
}

// include_stop_str_in_output: the same under any split, ending with the stop string that ended it.
TEST(StopMatcher, IncludedStopStringsEndTheTextWhateverTheSplit) { check_random_splits(17, true); }

TEST(StopMatcher, LinearOnHostileStops) {
  // Text that keeps matching a long stop string's prefix: a quadratic matcher would take minutes.
  const std::string stop = std::string(200000, 'a') + "b";
  StopMatcher m({stop, std::string(150000, 'a') + "c", "zz"});
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  for (int i = 0; i < 200000; ++i) out += m.push("a");
  EXPECT_TRUE(out.empty());  // everything could still begin the first stop string
  out += m.push("a");        // now the oldest "a" cannot
  EXPECT_EQ(out, "a");
  out += m.flush();
  EXPECT_EQ(out.size(), 200001u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  StopMatcher hit({stop});
  EXPECT_EQ(hit.push(std::string(5, 'a')), "");
  EXPECT_EQ(hit.push(std::string(199995, 'a') + "b tail"), "");
  EXPECT_TRUE(hit.stopped());
}

TEST(TextStream, MultiByteCharactersSplitAcrossTokensAreNeverCut) {
  // "é€😀" as single bytes: every token is one byte of a multi-byte character.
  const FakeCodec codec = FakeCodec::bytes();
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";
  TextStream s(codec, {});
  std::vector<std::string> pieces;
  for (unsigned char c : text) pieces.push_back(s.push(c));
  pieces.push_back(s.finish());
  std::string joined;
  for (const std::string& p : pieces) {
    EXPECT_TRUE(valid_utf8(p)) << p;
    joined += p;
  }
  EXPECT_EQ(joined, text);
  // Held back until complete: the first byte of "é" gives nothing, its second the character.
  EXPECT_EQ(pieces[1], "");
  EXPECT_EQ(pieces[2], "\xC3\xA9");
  EXPECT_EQ(pieces[6], "");
  EXPECT_EQ(pieces[7], "");
  EXPECT_EQ(pieces[8], "");
  EXPECT_EQ(pieces[9], "\xF0\x9F\x98\x80");
}

TEST(TextStream, IllFormedBytesBecomeReplacementCharacters) {
  const FakeCodec codec = FakeCodec::bytes();
  TextStream s(codec, {});
  std::string out;
  for (unsigned char c : std::string("x\xE2\x82y\xFF\xF0")) out += s.push(c);
  out += s.finish();  // the trailing incomplete "\xF0" too
  EXPECT_EQ(out, "x\xEF\xBF\xBDy\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(out, utf8_lossy("x\xE2\x82y\xFF\xF0"));
}

TEST(TextStream, RandomTokenisationsOfUnicodeWithStops) {
  std::mt19937 rng(11);
  const std::vector<std::string> chars = {
      "a", "b", " ", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xFF"};
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) text += chars[rng() % chars.size()];
    // Tokens are random byte ranges of the text, so characters are split anywhere.
    std::vector<std::string> tokens;
    for (size_t pos = 0; pos < text.size();) {
      const size_t len = 1 + rng() % 4;
      tokens.push_back(text.substr(pos, len));
      pos += len;
    }
    const FakeCodec codec(tokens);
    std::vector<std::string> stops;
    if (trial % 2) stops.push_back(chars[rng() % 6] + chars[rng() % 6]);  // valid UTF-8 stops
    bool should_stop = false;
    const std::string want = expected_output(utf8_lossy(text), stops, &should_stop);
    TextStream s(codec, stops);
    std::string got;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string piece = s.push(static_cast<int32_t>(i));
      EXPECT_TRUE(valid_utf8(piece));
      got += piece;
      ASSERT_EQ(want.compare(0, got.size(), got), 0);
    }
    got += s.finish();
    EXPECT_EQ(got, want);
    EXPECT_EQ(s.stopped(), should_stop);
  }
}

TEST(TextStream, CountsTokensUpToTheStopAndSkipsSpecialTokens) {
  const FakeCodec codec({"he", "llo", " wor", "ld", "<eos>"}, /*special=*/{4});
  TextStream s(codec, {"o w"});
  EXPECT_EQ(s.push(0), "he");
  EXPECT_EQ(s.push(1), "ll");  // "o" could begin "o w"
  EXPECT_EQ(s.push(2), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push(3), "");  // ignored once stopped
  EXPECT_EQ(s.tokens(), 3);
  EXPECT_EQ(s.finish(), "");

  TextStream t(codec, {});
  EXPECT_EQ(t.push(4), "");  // special tokens are skipped, as vLLM's skip_special_tokens
  EXPECT_EQ(t.push(0), "he");

  TextStream kept(codec, {}, 0, false, /*skip_special=*/false);  // skip_special_tokens false
  EXPECT_EQ(kept.push(4), "<eos>");
  TextStream with_stop(codec, {"o w"}, 0, /*include_stop=*/true);
  std::string text;
  for (int32_t id : {0, 1, 2, 3}) text += with_stop.push(id);
  EXPECT_EQ(text + with_stop.finish(), "hello w");  // through the stop string, then nothing
}

// min_tokens (vLLM's): a stop string that ends in the text of the first min_tokens tokens is
// passed over and emitted; one ending in a later token's text counts, even if it began earlier.
TEST(TextStream, StopStringsCountOnlyAfterMinTokens) {
  const FakeCodec codec({"ab", "c", "xa", "b", "cd"});
  const auto run = [&](int64_t min_tokens, const std::vector<int32_t>& ids) {
    TextStream s(codec, {"abc"}, min_tokens);
    std::string out;
    for (int32_t id : ids) out += s.push(id);
    out += s.finish();
    return std::make_pair(out, s.tokens());
  };
  // "abc" completes at token 2; with min_tokens 2 it is text, and the next "abc" (tokens 3-5,
  // ending in the 5th) stops generation.
  EXPECT_EQ(run(0, {0, 1, 2, 3, 4}), std::make_pair(std::string(""), int64_t{2}));
  EXPECT_EQ(run(1, {0, 1, 2, 3, 4}), std::make_pair(std::string(""), int64_t{2}));
  EXPECT_EQ(run(2, {0, 1, 2, 3, 4}), std::make_pair(std::string("abcx"), int64_t{5}));
  // A stop ending in token 5's text started in token 3's, inside the first min_tokens = 4.
  EXPECT_EQ(run(4, {0, 1, 2, 3, 4}), std::make_pair(std::string("abcx"), int64_t{5}));
  // Past every stop: the whole text, nothing held back at the end.
  EXPECT_EQ(run(5, {0, 1, 2, 3, 4}), std::make_pair(std::string("abcxabcd"), int64_t{5}));
  // After a passed-over match the automaton goes on from its border: in "ababa" the "aba" ending
  // in token 2 is passed over and the one overlapping it, ending in token 3, stops.
  const FakeCodec c1({"ab", "a", "ba"});
  TextStream s(c1, {"aba"}, 2);
  std::string out;
  for (int32_t id : {0, 1, 2}) out += s.push(id);
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(out, "ab");
  EXPECT_EQ(s.tokens(), 3);
  const FakeCodec c2({"ab", "c"});
  TextStream t(c2, {"cabc"}, 3);
  out.clear();
  for (int32_t id : {0, 1, 0, 1}) out += t.push(id);
  EXPECT_TRUE(t.stopped());  // "cabc" ends in token 4
  EXPECT_EQ(out, "ab");
}

}  // namespace
}  // namespace tandem::server
