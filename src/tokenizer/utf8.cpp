// UTF-8 helpers: strict well-formedness per Unicode table 3-7, the lossy conversion of Rust's
// from_utf8_lossy (one U+FFFD per maximal ill-formed subpart) and the streaming hold-back rule.
// No normalisation or property lookup here.
#include "tokenizer/utf8.h"

namespace tandem::tok {

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t next_code_point(std::string_view s, size_t& i) {
  auto b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  int n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (0x7F >> n);
  for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
  i += n;
  return cp;
}

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_code_point(s, i));
  return out;
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(c, out);
  return out;
}

namespace {

// Allowed range of the second byte for lead byte b (Unicode table 3-7); {0,0} if b cannot lead.
struct Range {
  uint8_t lo, hi;
  int len;
};
Range second_byte_range(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {0x80, 0xBF, 2};
  if (b == 0xE0) return {0xA0, 0xBF, 3};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {0x80, 0xBF, 3};
  if (b == 0xED) return {0x80, 0x9F, 3};
  if (b == 0xF0) return {0x90, 0xBF, 4};
  if (b >= 0xF1 && b <= 0xF3) return {0x80, 0xBF, 4};
  if (b == 0xF4) return {0x80, 0x8F, 4};
  return {0, 0, 0};
}

// Number of bytes from i that form a valid (possibly incomplete) prefix of one sequence.
size_t valid_prefix_length(std::string_view s, size_t i, int* want) {
  auto b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) {
    *want = 1;
    return 1;
  }
  Range r = second_byte_range(b);
  *want = r.len;
  if (r.len == 0) return 0;
  size_t n = 1;
  if (i + n >= s.size()) return n;
  auto c = static_cast<uint8_t>(s[i + n]);
  if (c < r.lo || c > r.hi) return n;
  ++n;
  while (static_cast<int>(n) < r.len && i + n < s.size()) {
    c = static_cast<uint8_t>(s[i + n]);
    if (c < 0x80 || c > 0xBF) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t valid_sequence_length(std::string_view s, size_t i) {
  int want = 0;
  size_t n = valid_prefix_length(s, i, &want);
  return want > 0 && static_cast<int>(n) == want ? n : 0;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = valid_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    int want = 0;
    size_t n = valid_prefix_length(s, i, &want);
    if (want > 0 && static_cast<int>(n) == want) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD for the maximal ill-formed subpart
      i += n == 0 ? 1 : n;
    }
  }
  return out;
}

size_t incomplete_tail_length(std::string_view s) {
  // A sequence is at most 4 bytes, so only a lead byte within the last 3 can be incomplete.
  size_t start = s.size() >= 3 ? s.size() - 3 : 0;
  for (size_t i = start; i < s.size(); ++i) {
    auto b = static_cast<uint8_t>(s[i]);
    if (b < 0xC2 || b > 0xF4) continue;
    int want = 0;
    size_t n = valid_prefix_length(s, i, &want);
    if (i + n == s.size() && static_cast<int>(n) < want) return n;
  }
  return 0;
}

}  // namespace tandem::tok
