// JSON Schema `pattern` (spec/json_pattern.h): the automaton against std::regex (ECMAScript, the
// same syntax and search semantics) on random strings written without escapes, that every prefix
// it keeps can still be completed to a match, and the refusals.
#include "spec/json_pattern.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>
#include <vector>

namespace tandem::json_pattern {
namespace {

// Patterns of the supported subset (as pydantic / OpenAI users write them).
const std::vector<std::string> kPatterns = {
    "^\\d{3}-\\d{4}$",
    "^[A-Z]{2}[0-9]{2,4}$",
    "abc",
    "^a(b|cd)*e?$",
    "^(?:[a-z]+\\.)+[a-z]{2,3}$",
    "[^abc]x",
    "^\\w+@\\w+\\.com$",
    "^#[0-9a-fA-F]{6}$",
    "^(yes|no|maybe)$",
    "^-?\\d+(\\.\\d{1,2})?$",
    "b+a*?$",
    "^\\s*\\S+\\s*$",
    "^x{2,}y{0,2}$",
    "\\W\\D",
    "^[a-c-]{1,3}z?$",
    "^\\u0041\\x42.$",
    "^(ab|a)(bc|c)$",
};

// Random strings over an alphabet that exercises the patterns (no '"', '\' or control bytes).
std::string random_string(std::mt19937_64& rng) {
  static const std::string alphabet = "abcdexyzABCDEFZ0123456789-.@# _";
  std::string s;
  const size_t n = rng() % 10;
  for (size_t i = 0; i < n; ++i) s.push_back(alphabet[rng() % alphabet.size()]);
  return s;
}

TEST(JsonPattern, AgreesWithStdRegexOnRandomStrings) {
  std::mt19937_64 rng(7);
  int matched = 0;
  for (const std::string& re : kPatterns) {
    const Pattern p = Pattern::compile(re);
    const std::regex oracle(re, std::regex::ECMAScript);
    for (int i = 0; i < 4000; ++i) {
      const std::string s = random_string(rng);
      const bool want = std::regex_search(s, oracle);
      ASSERT_EQ(p.matches(s), want) << "pattern " << re << " on '" << s << "'";
      matched += want;
    }
    // Strings built to match, where the pattern is anchored at both ends.
    for (const char* s :
         {"123-4567", "AB123", "abcde", "ace", "ab.cd.com", "zx", "a_b@x1.com", "#a0B9fF", "maybe",
          "-12.50", "ba", " word ", "xxxy", "!a", "a-c", "ABq", "abc"}) {
      ASSERT_EQ(p.matches(s), std::regex_search(std::string(s), oracle))
          << "pattern " << re << " on '" << s << "'";
    }
  }
  EXPECT_GT(matched, 2000);  // the random strings reach both outcomes
}

// From every state set the automaton reaches, some continuation matches: a breadth-first search
// over printable ASCII from each prefix of random walks finds an accepting set within 40 bytes.
TEST(JsonPattern, EveryKeptPrefixCanBeCompleted) {
  std::mt19937_64 rng(11);
  const auto completes = [](const Pattern& p, States s) {
    std::vector<States> frontier{s}, seen{s};
    for (int depth = 0; depth <= 40 && !frontier.empty(); ++depth) {
      std::vector<States> next;
      for (const States& f : frontier) {
        if (p.accepts(f)) return true;
        for (int c = 0x20; c < 0x7f; ++c) {
          const States t = p.step(f, static_cast<unsigned char>(c));
          if (Pattern::none(t)) continue;
          bool known = false;
          for (const States& k : seen) known = known || k == t;
          if (!known) seen.push_back(t), next.push_back(t);
        }
      }
      frontier = std::move(next);
    }
    return false;
  };
  for (const std::string& re : kPatterns) {
    const Pattern p = Pattern::compile(re);
    for (int walk = 0; walk < 30; ++walk) {
      States s = p.start();
      ASSERT_TRUE(completes(p, s)) << re;
      for (int step = 0; step < 12; ++step) {
        std::vector<unsigned char> allowed;
        for (int c = 0x20; c < 0x7f; ++c) {
          if (!Pattern::none(p.step(s, static_cast<unsigned char>(c)))) allowed.push_back(c);
        }
        if (allowed.empty()) {  // only a match ends here
          ASSERT_TRUE(p.accepts(s)) << re << ": stuck";
          break;
        }
        s = p.step(s, allowed[rng() % allowed.size()]);
        ASSERT_TRUE(completes(p, s)) << re << ": a kept prefix cannot complete";
      }
    }
  }
}

// Beside minLength / maxLength (bound_lengths): from the state sets of random walks, can_match
// over every window [lo, hi] of further characters within 0..12 equals a breadth-first search over
// printable ASCII (every character class of these patterns has an ASCII member, so ASCII strings
// reach every length a match can have).
TEST(JsonPattern, LengthTableAgreesWithASearch) {
  std::mt19937_64 rng(13);
  constexpr int kMost = 12;
  const auto layers = [](const Pattern& p, const States& s) {  // [len]: a match with len more?
    std::vector<bool> match(kMost + 1, false);
    std::vector<States> frontier{s};
    for (int len = 0; len <= kMost; ++len) {
      std::vector<States> next;
      for (const States& f : frontier) {
        match[len] = match[len] || p.accepts(f);
        for (int c = 0x20; c < 0x7f; ++c) {
          if (c == '"' || c == '\\') continue;
          const States t = p.step(f, static_cast<unsigned char>(c));
          if (Pattern::none(t)) continue;
          bool known = false;
          for (const States& k : next) known = known || k == t;
          if (!known) next.push_back(t);
        }
      }
      frontier = std::move(next);
    }
    return match;
  };
  int both = 0;
  for (const std::string& re : kPatterns) {
    for (const int64_t min_chars : {0, 3, 7}) {
      Pattern p = Pattern::compile(re);
      p.bound_lengths(min_chars);
      for (int walk = 0; walk < 6; ++walk) {
        States s = p.start();
        for (int step = 0; step < 6; ++step) {
          const std::vector<bool> match = layers(p, s);
          for (int lo = 0; lo <= std::min<int>(kMost, static_cast<int>(min_chars)); ++lo) {
            for (int hi = lo; hi <= kMost; ++hi) {
              bool want = false;
              for (int len = lo; len <= hi; ++len) want = want || match[len];
              ASSERT_EQ(p.can_match(s, lo, hi), want)
                  << re << " (min " << min_chars << "): [" << lo << ", " << hi << "]";
              both += want;
            }
          }
          std::vector<unsigned char> allowed;
          for (int c = 0x20; c < 0x7f; ++c) {
            if (!Pattern::none(p.step(s, static_cast<unsigned char>(c)))) allowed.push_back(c);
          }
          if (allowed.empty()) break;
          s = p.step(s, allowed[rng() % allowed.size()]);
        }
      }
    }
  }
  EXPECT_GT(both, 1000);  // windows with and without a match
}

TEST(JsonPattern, NonAsciiCharactersAreTheirUtf8Bytes) {
  const Pattern p = Pattern::compile("^caf\u00e9.$");
  EXPECT_TRUE(p.matches("caf\u00e9!"));
  EXPECT_TRUE(p.matches("caf\u00e9\u4e2d"));  // '.' takes a 3-byte character
  EXPECT_FALSE(p.matches("cafe!"));
  const Pattern neg = Pattern::compile("^[^a]$");
  EXPECT_TRUE(neg.matches("\u00e9"));
  EXPECT_FALSE(neg.matches("a"));
}

TEST(JsonPattern, RefusesWhatItCannotEnforce) {
  const auto refused = [](const std::string& re, const std::string& why) {
    try {
      (void)Pattern::compile(re);
      ADD_FAILURE() << re << " compiled";
    } catch (const PatternError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << re << ": " << e.what();
    }
  };
  refused("(a)\\1", "back-reference");
  refused("a(?=b)", "lookaround");
  refused("\\bword", "word boundary");
  refused("a^b", "anchor");
  refused("^a|b$", "top-level '|'");
  refused("[\u00e9]", "non-ASCII character in a class");
  refused("(ab", "unclosed '('");
  refused("ab)", "unbalanced ')'");
  refused("[ab", "unclosed '['");
  refused("*a", "nothing to repeat");
  refused("a{3,1}", "m < n");
  refused("^\\n$", "no string written without escapes");
  refused("^\"$", "no string written without escapes");
  refused(".{100}.{100}", "automaton states");
}

}  // namespace
}  // namespace tandem::json_pattern
