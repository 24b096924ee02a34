// Template lexing as jinja2's Lexer does it for transformers' environment: `{%-`/`-%}` strip all
// whitespace, trim_blocks drops one newline after a block or comment tag, lstrip_blocks drops the
// spaces and tabs before a block or comment tag that starts its line. Brackets are balanced so
// `}}` inside a dict literal does not end a tag. No line statements, no custom delimiters.
#include "tokenizer/jinja_lexer.h"

#include <cstring>

#include "core/error.h"
#include "tokenizer/jinja_value.h"
#include "tokenizer/utf8.h"

namespace tandem::tok::jinja {
namespace {

// Python str.rstrip(): strips trailing Unicode whitespace.
void rstrip_py(std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    if (!is_py_space(next_code_point(s, i))) break;
    end = start;
  }
  s.resize(end);
}

// Skips Python \s* from pos.
size_t skip_py_space(const std::string& s, size_t pos) {
  while (pos < s.size()) {
    size_t i = pos;
    if (!is_py_space(next_code_point(s, i))) break;
    pos = i;
  }
  return pos;
}

int line_at(const std::string& s, size_t pos, size_t* cache_pos, int* cache_line) {
  for (; *cache_pos < pos; ++*cache_pos) {
    if (s[*cache_pos] == '\n') ++*cache_line;
  }
  return *cache_line;
}

std::string unescape_string(const std::string& src, size_t& pos, int line) {
  char quote = src[pos++];
  std::string out;
  while (pos < src.size() && src[pos] != quote) {
    char c = src[pos++];
    if (c != '\\') {
      out += c;
      continue;
    }
    TANDEM_CHECK(pos < src.size(), "chat template line {}: unterminated string", line);
    char e = src[pos++];
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '0':
        out += '\0';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case 'a':
        out += '\a';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case '\n':
        break;
      case 'x':
      case 'u':
      case 'U': {
        int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        TANDEM_CHECK(pos + n <= src.size(), "chat template line {}: bad \\{} escape", line, e);
        append_utf8(static_cast<char32_t>(std::stoul(src.substr(pos, n), nullptr, 16)), out);
        pos += n;
        break;
      }
      default:  // Python keeps unknown escapes verbatim
        out += '\\';
        out += e;
    }
  }
  TANDEM_CHECK(pos < src.size(), "chat template line {}: unterminated string", line);
  ++pos;
  return out;
}

// Tokenises an expression from pos until the tag end (`end` = "}}" or "%}") at bracket depth 0.
// Returns the position just after the closing delimiter; *strip_after is set for `-}}`/`-%}`.
size_t lex_expression(const std::string& src, size_t pos, const char* end, int* line,
                      std::vector<Token>& out, bool* strip_after) {
  static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                               "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                               "]",  "{",  "}",  ",",  ".",  ":",  "|"};
  int depth = 0;
  while (true) {
    while (pos < src.size() && std::strchr(" \t\r\n", src[pos])) {
      if (src[pos] == '\n') ++*line;
      ++pos;
    }
    TANDEM_CHECK(pos < src.size(), "chat template line {}: tag not closed (missing '{}')", *line,
                 end);
    if (depth == 0) {
      if (src.compare(pos, 2, end) == 0) {
        *strip_after = false;
        out.push_back({Token::Type::kEnd, "", 0, 0, *line});
        return pos + 2;
      }
      if (src[pos] == '-' && src.compare(pos + 1, 2, end) == 0) {
        *strip_after = true;
        out.push_back({Token::Type::kEnd, "", 0, 0, *line});
        return pos + 3;
      }
    }
    char c = src[pos];
    Token t;
    t.line = *line;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t s = pos;
      while (pos < src.size() &&
             (std::isalnum(static_cast<unsigned char>(src[pos])) || src[pos] == '_'))
        ++pos;
      t.type = Token::Type::kName;
      t.text = src.substr(s, pos - s);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t s = pos;
      while (pos < src.size() &&
             (std::isdigit(static_cast<unsigned char>(src[pos])) || src[pos] == '_'))
        ++pos;
      bool is_float = false;
      if (pos + 1 < src.size() && src[pos] == '.' &&
          std::isdigit(static_cast<unsigned char>(src[pos + 1]))) {
        is_float = true;
        ++pos;
        while (pos < src.size() && std::isdigit(static_cast<unsigned char>(src[pos]))) ++pos;
      }
      if (pos < src.size() && (src[pos] == 'e' || src[pos] == 'E')) {
        is_float = true;
        ++pos;
        if (pos < src.size() && (src[pos] == '+' || src[pos] == '-')) ++pos;
        while (pos < src.size() && std::isdigit(static_cast<unsigned char>(src[pos]))) ++pos;
      }
      std::string num;
      for (size_t k = s; k < pos; ++k) {
        if (src[k] != '_') num += src[k];
      }
      t.type = is_float ? Token::Type::kFloat : Token::Type::kInt;
      if (is_float)
        t.f = std::stod(num);
      else
        t.i = std::stoll(num);
      t.text = num;
    } else if (c == '\'' || c == '"') {
      int start_line = *line;
      for (size_t k = pos + 1; k < src.size() && src[k] != c; ++k) {
        if (src[k] == '\n') ++*line;
      }
      t.type = Token::Type::kString;
      t.text = unescape_string(src, pos, start_line);
    } else {
      t.type = Token::Type::kOp;
      for (const char* op : kOps) {
        if (src.compare(pos, std::strlen(op), op) == 0) {
          t.text = op;
          break;
        }
      }
      TANDEM_CHECK(!t.text.empty(), "chat template line {}: unexpected character '{}'", *line, c);
      pos += t.text.size();
      if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
      if (t.text == ")" || t.text == "]" || t.text == "}") --depth;
    }
    out.push_back(std::move(t));
  }
}

}  // namespace

std::vector<Segment> lex_template(const std::string& raw) {
  // Newlines normalised to \n and one trailing newline dropped (keep_trailing_newline=False).
  std::string src;
  src.reserve(raw.size());
  for (size_t k = 0; k < raw.size(); ++k) {
    if (raw[k] == '\r') {
      src += '\n';
      if (k + 1 < raw.size() && raw[k + 1] == '\n') ++k;
    } else {
      src += raw[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();

  std::vector<Segment> segs;
  size_t pos = 0, line_pos = 0;
  int line_no = 1;
  bool line_starting = true;
  while (pos <= src.size()) {
    size_t tag = src.find('{', pos);
    while (tag != std::string::npos && tag + 1 < src.size() && !std::strchr("{%#", src[tag + 1])) {
      tag = src.find('{', tag + 1);
    }
    if (tag == std::string::npos || tag + 1 >= src.size()) {
      if (pos < src.size()) {
        segs.push_back(
            {Segment::Type::kText, line_at(src, pos, &line_pos, &line_no), src.substr(pos), {}});
      }
      break;
    }
    char kind = src[tag + 1];
    char sign = tag + 2 < src.size() ? src[tag + 2] : 0;
    std::string text = src.substr(pos, tag - pos);
    if (sign == '-') {
      rstrip_py(text);
    } else if (sign != '+' && kind != '{') {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if (l_pos > 0 || line_starting) {
        if (text.find_first_not_of(" \t", l_pos) == std::string::npos) text.resize(l_pos);
      }
    }
    int text_line = line_at(src, pos, &line_pos, &line_no);
    if (!text.empty()) segs.push_back({Segment::Type::kText, text_line, text, {}});
    int line = line_at(src, tag, &line_pos, &line_no);
    size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
    size_t after = 0;
    bool strip_after = false;
    if (kind == '#') {
      size_t close = src.find("#}", body);
      TANDEM_CHECK(close != std::string::npos, "chat template line {}: comment not closed", line);
      strip_after = close > body && src[close - 1] == '-';
      after = close + 2;
    } else {
      Segment seg{kind == '{' ? Segment::Type::kVar : Segment::Type::kBlock, line, {}, {}};
      int l = line;
      after = lex_expression(src, body, kind == '{' ? "}}" : "%}", &l, seg.tokens, &strip_after);
      segs.push_back(std::move(seg));
    }
    if (strip_after) {
      after = skip_py_space(src, after);
    } else if (kind != '{' && after < src.size() && src[after] == '\n') {
      ++after;  // trim_blocks
    }
    line_starting = after > 0 && src[after - 1] == '\n';
    pos = after;
    if (pos == src.size()) break;
  }
  return segs;
}

}  // namespace tandem::tok::jinja
