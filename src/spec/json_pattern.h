// JSON Schema's `pattern` for structured output: the regular expression (ECMA-262 syntax, the
// subset below) as a nondeterministic automaton over the UTF-8 bytes of a string value, which the
// schema cursor (json_schema.h) steps at every byte the model writes inside the string.
//
// Semantics: JSON Schema's (a search, not anchored unless the pattern says ^ / $), over the
// string as written without escapes: a string with a pattern takes no backslash, so its bytes are
// its characters' UTF-8 (a pattern that only a control character, '"' or '\' could satisfy is a
// compile error). Every state the automaton keeps can still reach a match, so every prefix the
// cursor accepts can be completed.
// Supported: literals (any character; non-ASCII ones as their UTF-8 bytes), '.', classes [...] and
// [^...] of ASCII members and ranges, \d \D \w \W \s \S, escaped metacharacters, \t \n \r \f \v,
// \uXXXX, groups (...) and (?:...), alternation, the quantifiers * + ? {n} {n,} {n,m} (lazy
// forms too: the same language), ^ at the start and $ at the end. Refused (an error naming it):
// back-references, lookaround, named groups, \b \B, anchors elsewhere, non-ASCII class members,
// and automata of more than kMaxStates states.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::json_pattern {

class PatternError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

constexpr int kMaxStates = 128;
using States = std::array<uint64_t, kMaxStates / 64>;  // a set of automaton states

class Pattern {
 public:
  // Throws PatternError (with the reason) for a pattern outside the subset or too large.
  static Pattern compile(const std::string& regex);

  States start() const { return start_; }
  // The states after byte c (only those that can still reach a match); none: c is refused.
  States step(const States& s, unsigned char c) const;
  bool accepts(const States& s) const { return (s[accept_ / 64] >> (accept_ % 64)) & 1u; }
  static bool none(const States& s) {
    for (uint64_t w : s)
      if (w != 0) return false;
    return true;
  }
  // Whether the whole string (written without escapes) matches: start, step, accepts.
  bool matches(const std::string& s) const;

  // Beside minLength / maxLength: a table of the counts of further characters with which each
  // state reaches a match (a byte outside 0x80..0xBF starts a character; '"', '\\' and control
  // bytes are never written), for counts up to min_chars + kMaxStates, which is enough: a match
  // with more characters than lo + kMaxStates - 1 has a cycle to drop, so one in
  // [lo, lo + kMaxStates) exists whenever one at lo or above does. Throws PatternError above
  // kMaxLengthBound.
  void bound_lengths(int64_t min_chars);
  // Whether states s reach a match with a count of further characters in [lo, hi] (lo clipped at
  // 0; lo above min_chars of bound_lengths is not asked). Without bound_lengths: whether any
  // state of s is live.
  bool can_match(const States& s, int64_t lo, int64_t hi) const;
  static constexpr int64_t kMaxLengthBound = 8192;

 private:
  struct Edge {
    uint8_t lo, hi;  // bytes lo..hi
    int16_t to;
  };
  std::vector<std::vector<Edge>> edges_;  // per state
  std::vector<States> closure_;           // per state: the states its empty moves reach, itself too
  States live_{}, start_{};
  int accept_ = 0;
  std::vector<States> lengths_;  // bound_lengths: [count]: the states that match with it
  friend class Builder;
};

}  // namespace tandem::json_pattern
