// JSON Schema `pattern`: parser (ECMA-262 subset) and automaton (json_pattern.h).
#include "spec/json_pattern.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <utility>

namespace tandem::json_pattern {

namespace {

using Range = std::pair<uint8_t, uint8_t>;
using Seq = std::vector<Range>;  // one character as consecutive byte ranges

// The expression tree: a character (alternative byte sequences), a concatenation, an alternation
// or a repetition of its kid min..max times (max < 0: unbounded).
struct Expr {
  enum Kind { kChar, kConcat, kAlt, kRepeat } kind = kConcat;
  std::vector<Seq> alts;
  std::vector<Expr> kids;
  int min = 0, max = 0;
};

[[noreturn]] void fail(const std::string& why) { throw PatternError(why); }

// Any character outside ASCII, as UTF-8 lead and continuation bytes (the JSON automaton checks the
// finer rules of well-formed UTF-8).
void add_non_ascii(std::vector<Seq>& alts) {
  alts.push_back({{0xC2, 0xDF}, {0x80, 0xBF}});
  alts.push_back({{0xE0, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}});
  alts.push_back({{0xF0, 0xF4}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}});
}

using AsciiSet = std::array<bool, 128>;

Expr char_of(const AsciiSet& set, bool negated) {
  Expr e;
  e.kind = Expr::kChar;
  for (int c = 0; c < 128;) {
    if (set[c] == negated) {
      ++c;
      continue;
    }
    int d = c;
    while (d + 1 < 128 && set[d + 1] != negated) ++d;
    e.alts.push_back({{static_cast<uint8_t>(c), static_cast<uint8_t>(d)}});
    c = d + 1;
  }
  if (negated) add_non_ascii(e.alts);
  return e;
}

void add_range(AsciiSet& set, int lo, int hi) {
  for (int c = lo; c <= hi; ++c) set[c] = true;
}

// The ASCII members of \d, \w, \s.
AsciiSet class_escape(char k) {
  AsciiSet s{};
  if (k == 'd') add_range(s, '0', '9');
  if (k == 'w') add_range(s, '0', '9'), add_range(s, 'A', 'Z'), add_range(s, 'a', 'z'), s['_'] = 1;
  if (k == 's') add_range(s, '\t', '\r'), s[' '] = true;
  return s;
}

// The UTF-8 bytes of code point cp, each as a one-byte range.
Seq utf8(uint32_t cp) {
  uint8_t b[4];
  int n = 0;
  if (cp < 0x80) {
    b[n++] = static_cast<uint8_t>(cp);
  } else if (cp < 0x800) {
    b[n++] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    b[n++] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    b[n++] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    b[n++] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    b[n++] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  } else {
    b[n++] = static_cast<uint8_t>(0xF0 | (cp >> 18));
    b[n++] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
    b[n++] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    b[n++] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
  Seq s(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) s[static_cast<size_t>(k)] = {b[k], b[k]};
  return s;
}

Expr literal(uint32_t cp) {
  Expr e;
  e.kind = Expr::kChar;
  e.alts.push_back(utf8(cp));
  return e;
}

class Parser {
 public:
  explicit Parser(std::string_view re) : re_(re) {}

  Expr parse() {
    Expr e = alternation();
    if (i_ < re_.size()) fail(at("unbalanced ')'"));
    return e;
  }

 private:
  std::string at(const std::string& why) const { return at(why, i_); }
  static std::string at(const std::string& why, size_t pos) {
    return why + " at offset " + std::to_string(pos);
  }
  bool more() const { return i_ < re_.size(); }
  char peek() const { return re_[i_]; }

  Expr alternation() {
    Expr first = sequence();
    if (!more() || peek() != '|') return first;
    Expr e;
    e.kind = Expr::kAlt;
    e.kids.push_back(std::move(first));
    while (more() && peek() == '|') {
      ++i_;
      e.kids.push_back(sequence());
    }
    return e;
  }

  Expr sequence() {
    Expr e;
    e.kind = Expr::kConcat;
    while (more() && peek() != '|' && peek() != ')') {
      Expr a = atom();
      e.kids.push_back(quantified(std::move(a)));
    }
    return e;
  }

  Expr quantified(Expr a) {
    if (!more()) return a;
    int lo = 0, hi = 0;
    const char c = peek();
    if (c == '*') {
      lo = 0, hi = -1, ++i_;
    } else if (c == '+') {
      lo = 1, hi = -1, ++i_;
    } else if (c == '?') {
      lo = 0, hi = 1, ++i_;
    } else if (c == '{') {
      ++i_;
      lo = number();
      hi = lo;
      if (more() && peek() == ',') {
        ++i_;
        hi = more() && peek() == '}' ? -1 : number();
      }
      if (!more() || peek() != '}') fail(at("a '{' that is not a quantifier {n}, {n,} or {n,m}"));
      ++i_;
      if (hi >= 0 && hi < lo) fail(at("a quantifier {n,m} with m < n"));
    } else {
      return a;
    }
    if (more() && peek() == '?') ++i_;  // lazy: the same language
    if (more() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
      fail(at("a quantifier after a quantifier"));
    }
    Expr r;
    r.kind = Expr::kRepeat;
    r.min = lo, r.max = hi;
    r.kids.push_back(std::move(a));
    return r;
  }

  int number() {
    int n = 0, digits = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      n = n * 10 + (peek() - '0');
      if (n > 1000) fail(at("a repetition count above 1000"));
      ++i_, ++digits;
    }
    if (digits == 0) fail(at("a '{' that is not a quantifier {n}, {n,} or {n,m}"));
    return n;
  }

  uint32_t code_point() {  // one UTF-8 character of the pattern itself
    const auto b0 = static_cast<unsigned char>(re_[i_++]);
    if (b0 < 0x80) return b0;
    const int n = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : 1;
    uint32_t cp = b0 & (0x3F >> n);
    for (int k = 0; k < n; ++k) {
      if (!more()) fail(at("a truncated UTF-8 character"));
      cp = (cp << 6) | (static_cast<unsigned char>(re_[i_++]) & 0x3F);
    }
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (!more() || !std::isxdigit(static_cast<unsigned char>(peek()))) {
        fail(at("a malformed \\x or \\u escape"));
      }
      const char h = peek();
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++i_;
    }
    return v;
  }

  // After a backslash: a class escape (sets `set`, returns true) or one character (cp).
  bool escape(AsciiSet& set, bool& negated, uint32_t& cp) {
    if (!more()) fail(at("a trailing backslash"));
    const size_t backslash = i_ - 1;  // where escape errors point
    const char k = re_[i_++];
    switch (k) {
      case 'd':
      case 'w':
      case 's':
        set = class_escape(k), negated = false;
        return true;
      case 'D':
      case 'W':
      case 'S':
        set = class_escape(static_cast<char>(k | 0x20)), negated = true;
        return true;
      case 't':
        cp = '\t';
        return false;
      case 'n':
        cp = '\n';
        return false;
      case 'r':
        cp = '\r';
        return false;
      case 'f':
        cp = '\f';
        return false;
      case 'v':
        cp = '\v';
        return false;
      case '0':
        cp = 0;
        return false;
      case 'x':
        cp = hex(2);
        return false;
      case 'u':
        cp = hex(4);
        if (cp >= 0xD800 && cp < 0xE000) fail(at("a surrogate \\u escape"));
        return false;
      case 'b':
      case 'B':
        fail(at("a word boundary (\\b, \\B)", backslash));
      case 'c':
      case 'k':
      case 'p':
      case 'P':
        fail(at(std::string("the escape \\") + k, backslash));
      default:
        if (k >= '1' && k <= '9') fail(at("a back-reference", backslash));
        if ((k >= 'a' && k <= 'z') || (k >= 'A' && k <= 'Z')) {
          fail(at(std::string("the escape \\") + k, backslash));
        }
        --i_;
        cp = code_point();  // an escaped metacharacter or other punctuation: itself
        return false;
    }
  }

  Expr atom() {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (more() && peek() == '?') {
        if (i_ + 1 < re_.size() && re_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          fail(at("lookaround or a named group"));
        }
      }
      Expr e = alternation();
      if (!more() || peek() != ')') fail(at("an unclosed '('"));
      ++i_;
      return e;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      AsciiSet nl{};
      nl['\n'] = nl['\r'] = true;
      return char_of(nl, true);
    }
    if (c == '\\') {
      ++i_;
      AsciiSet set{};
      bool negated = false;
      uint32_t cp = 0;
      if (escape(set, negated, cp)) return char_of(set, negated);
      return literal(cp);
    }
    if (c == '^' || c == '$') fail(at("an anchor (^, $) inside the pattern"));
    if (c == '*' || c == '+' || c == '?' || c == '{')
      fail(at("a quantifier with nothing to repeat"));
    return literal(code_point());
  }

  Expr char_class() {
    ++i_;  // '['
    bool negated = false;
    if (more() && peek() == '^') negated = true, ++i_;
    AsciiSet set{};
    bool first = true;
    while (true) {
      if (!more()) fail(at("an unclosed '['"));
      if (peek() == ']' && !first) break;
      first = false;
      int lo = member(set);
      if (lo < 0) continue;  // a class escape, added
      if (more() && peek() == '-' && i_ + 1 < re_.size() && re_[i_ + 1] != ']') {
        ++i_;
        const int hi = member(set);
        if (hi < 0) fail(at("a range to a class escape"));
        if (hi < lo) fail(at("a class range out of order"));
        add_range(set, lo, hi);
      } else {
        set[lo] = true;
      }
    }
    ++i_;  // ']'
    return char_of(set, negated);
  }

  // A class member: its ASCII code, or -1 for a class escape (its members added to set).
  int member(AsciiSet& set) {
    uint32_t cp = 0;
    if (peek() == '\\') {
      ++i_;
      AsciiSet esc{};
      bool neg = false;
      if (escape(esc, neg, cp)) {
        if (neg) fail(at("\\D, \\W or \\S inside a class"));
        for (int k = 0; k < 128; ++k) set[k] = set[k] || esc[k];
        return -1;
      }
    } else {
      cp = code_point();
    }
    if (cp >= 128) fail(at("a non-ASCII character in a class"));
    return static_cast<int>(cp);
  }

  std::string_view re_;
  size_t i_ = 0;
};

}  // namespace

// Thompson's construction over bytes, with the bytes a string cannot hold unescaped (control
// characters, '"', '\') left out of every edge.
class Builder {
 public:
  int state() {
    if (static_cast<int>(p_.edges_.size()) >= kMaxStates) {
      throw PatternError("the pattern needs more than " + std::to_string(kMaxStates) +
                         " automaton states");
    }
    p_.edges_.emplace_back();
    eps_.emplace_back();
    return static_cast<int>(p_.edges_.size()) - 1;
  }
  void edge(int from, uint8_t lo, uint8_t hi, int to) {
    static constexpr Range kWritable[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xFF}};
    for (const auto& [a, b] : kWritable) {
      const uint8_t l = std::max(lo, a), h = std::min(hi, b);
      if (l <= h) p_.edges_[from].push_back({l, h, static_cast<int16_t>(to)});
    }
  }
  void eps(int from, int to) { eps_[from].push_back(to); }

  // The states of e from `in`; returns its end state.
  int build(const Expr& e, int in) {
    switch (e.kind) {
      case Expr::kChar: {
        const int out = state();
        for (const Seq& s : e.alts) {
          int cur = in;
          for (size_t k = 0; k + 1 < s.size(); ++k) {
            const int next = state();
            edge(cur, s[k].first, s[k].second, next);
            cur = next;
          }
          edge(cur, s.back().first, s.back().second, out);
        }
        return out;
      }
      case Expr::kConcat: {
        int cur = in;
        for (const Expr& k : e.kids) cur = build(k, cur);
        return cur;
      }
      case Expr::kAlt: {
        const int out = state();
        for (const Expr& k : e.kids) {
          const int s = state();
          eps(in, s);
          eps(build(k, s), out);
        }
        return out;
      }
      case Expr::kRepeat: {
        int cur = in;
        for (int k = 0; k < e.min; ++k) cur = build(e.kids[0], cur);
        if (e.max < 0) {  // a loop: s -kid-> back to s
          const int s = state();
          eps(cur, s);
          eps(build(e.kids[0], s), s);
          return s;
        }
        std::vector<int> ends{cur};
        for (int k = e.min; k < e.max; ++k) ends.push_back(cur = build(e.kids[0], cur));
        const int out = state();
        for (int end : ends) eps(end, out);
        return out;
      }
    }
    return in;
  }

  Pattern finish(int start, int accept) {
    const int n = static_cast<int>(p_.edges_.size());
    const auto set = [](States& s, int i) { s[i / 64] |= uint64_t{1} << (i % 64); };
    const auto has = [](const States& s, int i) { return (s[i / 64] >> (i % 64)) & 1u; };
    p_.closure_.assign(n, States{});
    for (int i = 0; i < n; ++i) {  // depth-first over the empty moves
      std::vector<int> todo{i};
      set(p_.closure_[i], i);
      while (!todo.empty()) {
        const int s = todo.back();
        todo.pop_back();
        for (int t : eps_[s]) {
          if (!has(p_.closure_[i], t)) set(p_.closure_[i], t), todo.push_back(t);
        }
      }
    }
    set(p_.live_, accept);  // the states that reach a match
    for (bool grew = true; grew;) {
      grew = false;
      for (int i = 0; i < n; ++i) {
        if (has(p_.live_, i)) continue;
        bool live = false;
        for (int t : eps_[i]) live = live || has(p_.live_, t);
        for (const Pattern::Edge& e : p_.edges_[i]) live = live || has(p_.live_, e.to);
        if (live) set(p_.live_, i), grew = true;
      }
    }
    p_.accept_ = accept;
    for (size_t w = 0; w < p_.start_.size(); ++w) {
      p_.start_[w] = p_.closure_[start][w] & p_.live_[w];
    }
    if (Pattern::none(p_.start_)) {
      throw PatternError("the pattern matches no string written without escapes");
    }
    return p_;
  }

 private:
  Pattern p_;
  std::vector<std::vector<int>> eps_;
};

Pattern Pattern::compile(const std::string& regex) {
  std::string_view re = regex;
  const bool from_start = !re.empty() && re.front() == '^';
  if (from_start) re.remove_prefix(1);
  const bool to_end =
      !re.empty() && re.back() == '$' && (re.size() < 2 || re[re.size() - 2] != '\\');
  if (to_end) re.remove_suffix(1);
  const Expr e = Parser(re).parse();
  if ((from_start || to_end) && e.kind == Expr::kAlt) {
    throw PatternError("an anchor beside a top-level '|' (group the alternatives: ^(a|b)$)");
  }
  Builder b;
  const int start = b.state();
  if (!from_start) b.edge(start, 0x00, 0xFF, start);  // a search: anything before the match
  const int end = b.build(e, start);
  int accept = end;
  if (!to_end) {  // and anything after it
    accept = b.state();
    b.eps(end, accept);
    b.edge(accept, 0x00, 0xFF, accept);
  }
  return b.finish(start, accept);
}

States Pattern::step(const States& s, unsigned char c) const {
  States next{};
  for (int i = 0; i < static_cast<int>(edges_.size()); ++i) {
    if (!((s[i / 64] >> (i % 64)) & 1u)) continue;
    for (const Edge& e : edges_[i]) {
      if (c < e.lo || c > e.hi) continue;
      for (size_t w = 0; w < next.size(); ++w) next[w] |= closure_[e.to][w];
    }
  }
  for (size_t w = 0; w < next.size(); ++w) next[w] &= live_[w];
  return next;
}

namespace {
bool meet(const States& a, const States& b) {
  for (size_t w = 0; w < a.size(); ++w) {
    if ((a[w] & b[w]) != 0) return true;
  }
  return false;
}
}  // namespace

void Pattern::bound_lengths(int64_t min_chars) {
  if (min_chars > kMaxLengthBound) {
    throw PatternError("minLength above " + std::to_string(kMaxLengthBound) + " beside a pattern");
  }
  const auto has = [](const States& s, int i) { return (s[i / 64] >> (i % 64)) & 1u; };
  // Per edge: whether its bytes hold one that starts a character the string may hold, and one
  // that continues a character.
  const auto starts = [](const Edge& e) {
    for (int b = e.lo; b <= e.hi; ++b) {
      if (b >= 0x20 && b != '"' && b != '\\' && (b < 0x80 || b > 0xBF)) return true;
    }
    return false;
  };
  std::vector<std::vector<std::pair<bool, bool>>> kinds(edges_.size());
  for (size_t r = 0; r < edges_.size(); ++r) {
    for (const Edge& e : edges_[r]) kinds[r].emplace_back(starts(e), e.hi >= 0x80 && e.lo <= 0xBF);
  }
  const int n = static_cast<int>(edges_.size());
  const int64_t cap = min_chars + kMaxStates;
  lengths_.assign(static_cast<size_t>(cap + 1), States{});
  for (int64_t len = 0; len <= cap; ++len) {
    States& at = lengths_[static_cast<size_t>(len)];
    // Continuation bytes add no character, so `at` feeds itself: grow it to its fixed point.
    for (bool grew = true; grew;) {
      grew = false;
      States own{};  // states whose own moves reach a match with len characters
      for (int r = 0; r < n; ++r) {
        bool ok = len == 0 && r == accept_;
        for (size_t i = 0; i < edges_[r].size() && !ok; ++i) {
          const auto [starts_char, continues_char] = kinds[r][i];
          const int to = edges_[r][i].to;
          ok = (len > 0 && starts_char && has(lengths_[static_cast<size_t>(len - 1)], to)) ||
               (continues_char && has(at, to));
        }
        if (ok) own[r / 64] |= uint64_t{1} << (r % 64);
      }
      for (int q = 0; q < n; ++q) {
        if (!has(at, q) && meet(closure_[q], own)) {
          at[q / 64] |= uint64_t{1} << (q % 64);
          grew = true;
        }
      }
    }
  }
}

bool Pattern::can_match(const States& s, int64_t lo, int64_t hi) const {
  if (lengths_.empty()) return !none(s);
  lo = std::max<int64_t>(lo, 0);
  hi = std::min({hi, lo + kMaxStates - 1, static_cast<int64_t>(lengths_.size()) - 1});
  for (int64_t len = lo; len <= hi; ++len) {
    if (meet(s, lengths_[static_cast<size_t>(len)])) return true;
  }
  return false;
}

bool Pattern::matches(const std::string& s) const {
  States st = start_;
  for (const char c : s) {
    st = step(st, static_cast<unsigned char>(c));
    if (none(st)) return false;
  }
  return accepts(st);
}

}  // namespace tandem::json_pattern
