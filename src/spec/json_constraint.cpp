// JSON mode and structured output: the byte automaton and the row mask (json_constraint.h).
#include "spec/json_constraint.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <string_view>

namespace tandem {

namespace {

bool blank(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool hex(unsigned char c) { return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
constexpr const char* kLiterals[] = {"true", "false", "null"};

}  // namespace

bool JsonAutomaton::feed(unsigned char c) {
  JsonAutomaton next = *this;
  if (!next.step(c)) return false;
  *this = next;
  return true;
}

bool JsonAutomaton::in_object() const {
  const int d = depth_ - 1;
  return (stack_[d / 64] >> (d % 64)) & 1u;
}

void JsonAutomaton::close_value() { mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfter; }

bool JsonAutomaton::number_end(unsigned char c) {
  if (!schema_.end()) return false;
  close_value();
  return step(c);  // the byte after the number, in the container's (or the root's) state
}

bool JsonAutomaton::can_end() const {
  if (complete()) return true;
  const bool number_ends = mode_ == Mode::kZero || mode_ == Mode::kInt || mode_ == Mode::kFrac ||
                           mode_ == Mode::kExpDigits;
  if (depth_ != 0 || !number_ends) return false;
  SchemaCursor s = schema_;
  return s.end();
}

bool JsonAutomaton::string_byte(unsigned char c, bool starts_char) {
  return key_ ? schema_.key_byte(c) : schema_.scalar(c, starts_char);
}

bool JsonAutomaton::step(unsigned char c) {
  // Blank space: none before the root value (but lead_blank_ bytes), and outside strings runs of
  // at most kMaxBlankRun (room for indentation; a model cannot idle in blank space forever); with
  // a schema, llama.cpp's rule: one space, or a newline and at most kMaxIndent spaces or tabs.
  // (A byte after a number is counted once, when number_end steps it in the container's state.)
  const bool in_string =
      mode_ == Mode::kString || mode_ == Mode::kEscape || mode_ == Mode::kUnicode;
  const bool in_number = mode_ >= Mode::kMinus && mode_ <= Mode::kExpDigits;
  if (!in_string && !in_number) {
    if (blank(c)) {
      bool ok;
      if (mode_ == Mode::kValue && depth_ == 0) {
        ok = blank_run_ < lead_blank_;
      } else if (!schema_.active()) {
        ok = blank_run_ < kMaxBlankRun;
      } else if (blank_run_ == 0) {
        ok = c == ' ' || c == '\n';
      } else {
        ok = blank_first_ == '\n' && (c == ' ' || c == '\t') && blank_run_ <= kMaxIndent;
      }
      if (!ok) return false;
      if (blank_run_ == 0) blank_first_ = c;
      ++blank_run_;
    } else {
      blank_run_ = 0;
    }
  }
  // A value begins here (modes kValue and kFirstItem).
  const auto begin_value = [&]() -> bool {
    if (depth_ == 0 && object_root_ && c != '{') return false;
    const bool starts = c == '{' || c == '[' || c == '"' || c == '-' || digit(c) || c == 't' ||
                        c == 'f' || c == 'n';
    if (!starts || ((c == '{' || c == '[') && depth_ >= kMaxDepth) || !schema_.begin(c)) {
      return false;
    }
    switch (c) {
      case '{':
      case '[': {
        if (depth_ >= kMaxDepth) return false;
        const uint64_t bit = uint64_t{1} << (depth_ % 64);
        uint64_t& word = stack_[depth_ / 64];
        word = c == '{' ? (word | bit) : (word & ~bit);
        ++depth_;
        mode_ = c == '{' ? Mode::kFirstKey : Mode::kFirstItem;
        return true;
      }
      case '"':
        mode_ = Mode::kString;
        key_ = false;
        return true;
      case '-':
        mode_ = Mode::kMinus;
        return true;
      case '0':
        mode_ = Mode::kZero;
        return true;
      case 't':
      case 'f':
      case 'n':
        mode_ = Mode::kLiteral;
        lit_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
        pos_ = 1;
        return true;
      default:
        if (c >= '1' && c <= '9') {
          mode_ = Mode::kInt;
          return true;
        }
        return false;
    }
  };
  const auto close_container = [&](bool object) -> bool {
    if (depth_ == 0 || in_object() != object || !schema_.end()) return false;
    --depth_;
    close_value();
    return true;
  };
  switch (mode_) {
    case Mode::kValue:
      return blank(c) || begin_value();
    case Mode::kFirstKey:
      if (blank(c)) return true;
      if (c == '}') return close_container(true);
      [[fallthrough]];
    case Mode::kKey:
      if (blank(c)) return true;
      if (c != '"' || !schema_.key_begin()) return false;
      mode_ = Mode::kString;
      key_ = true;
      return true;
    case Mode::kColon:
      if (blank(c)) return true;
      if (c != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kAfter:
      if (blank(c)) return true;
      if (c == ',') {
        if (!schema_.comma()) return false;
        mode_ = in_object() ? Mode::kKey : Mode::kValue;
        return true;
      }
      if (c == '}' || c == ']') return close_container(c == '}');
      return false;
    case Mode::kFirstItem:
      if (blank(c)) return true;
      if (c == ']') return close_container(false);
      return begin_value();
    case Mode::kString:
      if (utf8_left_ > 0) {  // a continuation byte of a multi-byte character
        if (c < utf8_lo_ || c > utf8_hi_) return false;
        --utf8_left_;
        utf8_lo_ = 0x80;
        utf8_hi_ = 0xBF;
        return string_byte(c, false);
      }
      if (c >= 0x80) {  // a lead byte: how many follow, and the range of the first (RFC 3629)
        utf8_lo_ = 0x80;
        utf8_hi_ = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
          utf8_left_ = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
          utf8_left_ = 2;
          if (c == 0xE0) utf8_lo_ = 0xA0;  // no overlong forms
          if (c == 0xED) utf8_hi_ = 0x9F;  // no surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
          utf8_left_ = 3;
          if (c == 0xF0) utf8_lo_ = 0x90;
          if (c == 0xF4) utf8_hi_ = 0x8F;  // nothing above U+10FFFF
        } else {
          return false;
        }
        return string_byte(c, true);
      }
      if (c == '"') {
        if (key_) {
          mode_ = Mode::kColon;
          return schema_.key_end();
        }
        if (!schema_.scalar(c, false) || !schema_.end()) return false;
        close_value();
        return true;
      }
      if (c == '\\') {
        mode_ = Mode::kEscape;
        return string_byte(c, true);
      }
      return c >= 0x20 && string_byte(c, true);
    case Mode::kEscape:
      if (c == 'u') {
        mode_ = Mode::kUnicode;
        hex_ = 0;
        return string_byte(c, false);
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
          c == 't') {
        mode_ = Mode::kString;
        return string_byte(c, false);
      }
      return false;
    case Mode::kUnicode:
      if (!hex(c)) return false;
      if (++hex_ == 4) mode_ = Mode::kString;
      return string_byte(c, false);
    case Mode::kMinus:
      if (c == '0') {
        mode_ = Mode::kZero;
        return schema_.scalar(c, false);
      }
      if (digit(c)) {
        mode_ = Mode::kInt;
        return schema_.scalar(c, false);
      }
      return false;
    case Mode::kZero:
    case Mode::kInt:
    case Mode::kFrac:
      if (digit(c) && mode_ != Mode::kZero) return schema_.scalar(c, false);
      if (c == '.' && mode_ != Mode::kFrac) {
        mode_ = Mode::kDot;
        return schema_.scalar(c, false);
      }
      if (c == 'e' || c == 'E') {
        mode_ = Mode::kExp;
        return schema_.scalar(c, false);
      }
      if (digit(c)) return false;  // no digit after a leading 0
      return number_end(c);
    case Mode::kDot:
      if (!digit(c)) return false;
      mode_ = Mode::kFrac;
      return schema_.scalar(c, false);
    case Mode::kExp:
      if (c == '+' || c == '-') {
        mode_ = Mode::kExpSign;
        return schema_.scalar(c, false);
      }
      [[fallthrough]];
    case Mode::kExpSign:
      if (!digit(c)) return false;
      mode_ = Mode::kExpDigits;
      return schema_.scalar(c, false);
    case Mode::kExpDigits:
      if (digit(c)) return schema_.scalar(c, false);
      return number_end(c);
    case Mode::kLiteral: {
      const char* lit = kLiterals[lit_];
      if (static_cast<char>(c) != lit[pos_] || !schema_.scalar(c, false)) return false;
      if (lit[++pos_] == '\0') {
        if (!schema_.end()) return false;
        close_value();
      }
      return true;
    }
    case Mode::kDone:
      return blank(c);
  }
  return false;
}

bool JsonAutomaton::plain_text(std::string_view text) {
  if (text.empty()) return false;
  JsonAutomaton a(false);
  a.mode_ = Mode::kString;
  for (char c : text) {
    if (c == '"' || c == '\\' || !a.feed(static_cast<unsigned char>(c))) return false;
  }
  return a.plain_string_room() >= 0;
}

namespace {

// The plain_text character counts of a vocabulary (0: not plain), computed once per vocabulary
// (the last one asked for).
std::shared_ptr<const std::vector<uint16_t>> plain_flags(
    const std::shared_ptr<const std::vector<std::string>>& bytes) {
  static std::mutex mutex;
  static std::weak_ptr<const std::vector<std::string>> key;
  static std::shared_ptr<const std::vector<uint16_t>> flags;
  const std::lock_guard<std::mutex> lock(mutex);
  if (key.lock() != bytes || flags == nullptr) {
    auto f = std::make_shared<std::vector<uint16_t>>(bytes->size());
    for (size_t t = 0; t < bytes->size(); ++t) {
      const std::string& text = (*bytes)[t];
      if (!JsonAutomaton::plain_text(text) || text.size() > 65535) continue;
      (*f)[t] = static_cast<uint16_t>(std::count_if(text.begin(), text.end(), [](char c) {
        return (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // a character's first byte
      }));
    }
    flags = std::move(f);
    key = bytes;
  }
  return flags;
}

}  // namespace

JsonConstraint::JsonConstraint(std::shared_ptr<const std::vector<std::string>> token_bytes,
                               std::vector<int32_t> stop_ids, bool after_think,
                               std::shared_ptr<const JsonSchema> schema)
    : bytes_(std::move(token_bytes)),
      plain_(plain_flags(bytes_)),
      stop_ids_(std::move(stop_ids)),
      schema_(std::move(schema)) {
  state_.thinking = after_think;
  const int lead = after_think ? kLeadBlank : 0;
  state_.json = schema_ ? JsonAutomaton(schema_.get(), lead) : JsonAutomaton(true, lead);
}

bool JsonConstraint::take(Cursor& c, int32_t token) const {
  static constexpr std::string_view kClose = "</think>";
  if (token < 0 || static_cast<size_t>(token) >= bytes_->size()) return false;
  const std::string& text = (*bytes_)[static_cast<size_t>(token)];
  if (text.empty()) return c.thinking;  // a special token: free in the think block, no JSON
  Cursor d = c;
  for (char ch : text) {
    if (d.thinking) {  // the tag has no proper border that is also a prefix but '<'
      d.matched = ch == kClose[d.matched] ? d.matched + 1 : (ch == '<' ? 1 : 0);
      if (d.matched == kClose.size()) d.thinking = false;
    } else if (!d.json.advance(static_cast<unsigned char>(ch))) {  // d is dropped on failure
      return false;
    }
  }
  c = d;
  return true;
}

void JsonConstraint::apply(float* row, int64_t vocab, std::span<const int32_t> pending) const {
  const auto stop = [&](int32_t t) {
    return std::find(stop_ids_.begin(), stop_ids_.end(), t) != stop_ids_.end();
  };
  Cursor a = state_;
  for (int32_t t : pending) {
    if (stop(t) || !take(a, t)) return;  // this row is never used: its draft was refused
  }
  const bool done = !a.thinking && a.json.complete();
  const bool can_stop = !a.thinking && a.json.can_end();  // also a root number that ends here
  const int64_t room = a.thinking ? -1 : a.json.plain_string_room();
  // The bytes the state takes first: a token starting with another is refused without a walk.
  // And after a leading space (most tokens of a byte-level BPE vocabulary start with one).
  bool first[256], after_space[256];
  JsonAutomaton spaced = a.json;
  const bool space_ok = a.thinking || spaced.feed(' ');
  for (int c = 0; c < 256; ++c) {
    JsonAutomaton b = a.json, d = spaced;
    first[c] = a.thinking || b.advance(static_cast<unsigned char>(c));
    after_space[c] = a.thinking || (space_ok && d.advance(static_cast<unsigned char>(c)));
  }
  std::vector<float> stop_logits;  // as they were, for a row that would allow nothing
  for (int32_t t : stop_ids_) stop_logits.push_back(t >= 0 && t < vocab ? row[t] : 0.f);
  int64_t allowed = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const auto t = static_cast<int32_t>(v);
    const std::string* text =
        static_cast<size_t>(v) < bytes_->size() ? &(*bytes_)[static_cast<size_t>(v)] : nullptr;
    bool ok;
    const uint16_t chars = (*plain_)[static_cast<size_t>(v)];
    if (room >= 0 && chars > 0 && !stop(t)) {
      ok = chars <= room;  // plain text continues the string (within its length): no walk
    } else if (text != nullptr && !text->empty() &&
               (!first[static_cast<uint8_t>((*text)[0])] ||
                ((*text)[0] == ' ' && text->size() > 1 &&
                 !after_space[static_cast<uint8_t>((*text)[1])])) &&
               !stop(t)) {
      ok = false;
    } else if (stop(t)) {
      ok = can_stop || a.thinking;  // a stop ends a whole object (or a think block never closed)
    } else if (done && !stop_ids_.empty()) {
      ok = false;  // the object is complete: a stop token ends the output
    } else {
      Cursor b = a;
      ok = take(b, t);
    }
    if (!ok) {
      row[v] = -std::numeric_limits<float>::infinity();
    } else {
      ++allowed;
    }
  }
  // A schema no text can complete from here (recursion without end, nesting beyond kMaxDepth):
  // the stop tokens end the answer rather than a row of nothing but -inf.
  if (allowed == 0) {
    for (size_t i = 0; i < stop_ids_.size(); ++i) {
      if (stop_ids_[i] >= 0 && stop_ids_[i] < vocab) row[stop_ids_[i]] = stop_logits[i];
    }
  }
}

void JsonConstraint::add(int32_t token) {
  if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) return;
  take(state_, token);
}

}  // namespace tandem
