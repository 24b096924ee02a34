// JSON mode (OpenAI's response_format {"type": "json_object"}) and structured output ({"type":
// "json_schema"}): the generated text must be one JSON object (RFC 8259), or one JSON value that a
// schema accepts (json_schema.h), then a stop token. On the host, each row's tokens that cannot
// continue such a text from the state reached so far get a -inf logit, as the penalties adjust
// rows (penalties.h): a verify row j reads the state after the committed output and drafts 1..j,
// so with drafts accepted it masks exactly what plain decoding's row would, and output stays
// identical under speculation. Drafts themselves are not constrained (a draft the grammar refuses
// is rejected by its verify row).
// The grammar runs over bytes: a pushdown automaton of a few words (nesting up to kMaxDepth
// objects and arrays), copied per candidate token, with the schema's cursor beside it. Strings
// take well-formed UTF-8 only (a character may be split across tokens: the automaton carries its
// missing bytes), no control characters, and checked escapes and \uXXXX. Blank space (which the
// grammar allows anywhere between tokens, and where a small model can idle until max_tokens) is
// refused before the root value and beyond kMaxBlankRun bytes in a row; with a schema, blank
// space between tokens is one space or a newline and up to kMaxIndent spaces or tabs. Cost per
// row: a token whose first byte (or byte after a leading space) the state refuses is refused
// without a walk, plain text inside a string is taken without one (where the schema leaves the
// string free), the rest is walked; 0.5-1.3 ms over a 151,669-token vocabulary in JSON mode.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "spec/json_schema.h"

namespace tandem {

class JsonAutomaton {
 public:
  static constexpr int kMaxDepth = 128;
  static constexpr int kMaxBlankRun = 64;
  static constexpr int kMaxIndent = 32;  // with a schema: blank after a newline
  // object_root: the text must be an object (JSON mode); else any JSON value. lead_blank: blank
  // bytes allowed before the root value.
  explicit JsonAutomaton(bool object_root = true, int lead_blank = 0)
      : object_root_(object_root), lead_blank_(static_cast<uint8_t>(lead_blank)) {}
  // Structured output: the root is any value `schema` accepts (the schema outlives the automaton).
  JsonAutomaton(const JsonSchema* schema, int lead_blank)
      : object_root_(false), lead_blank_(static_cast<uint8_t>(lead_blank)), schema_(schema) {}
  // Takes one byte; false (and the state unchanged) when it cannot continue a JSON text.
  bool feed(unsigned char c);
  // The same without keeping the state when refused (the automaton is then spoilt: for copies
  // that are dropped on failure).
  bool advance(unsigned char c) { return step(c); }
  // Whether a whole value has been read (only blank space may follow).
  bool complete() const { return mode_ == Mode::kDone; }
  // Complete, or a root number that ends here (a stop token may follow it).
  bool can_end() const;
  // Inside a string, between characters: how many characters of plain text (plain_text())
  // continue it (JsonSchema::kUnbounded: any), or -1 (not in a string, or the schema has a
  // literal or a declared key to match there).
  int64_t plain_string_room() const {
    return mode_ == Mode::kString && utf8_left_ == 0 ? schema_.string_room() : -1;
  }
  // Text a string takes as it is: well-formed UTF-8, no control character, quote or backslash.
  static bool plain_text(std::string_view text);

 private:
  enum class Mode : uint8_t {
    kValue,      // a value is expected (blank space first)
    kFirstKey,   // after '{': a key or '}'
    kKey,        // after ',' in an object: a key
    kColon,      // after a key
    kAfter,      // after a value in a container: ',' or its closing bracket
    kFirstItem,  // after '[': a value or ']'
    kString,     // inside a string (key_ says which)
    kEscape,     // after '\'
    kUnicode,    // in \uXXXX (hex_ digits read)
    kMinus,      // number: after '-'
    kZero,       // number: a leading 0
    kInt,        // number: integer digits
    kDot,        // number: after '.'
    kFrac,       // number: fraction digits
    kExp,        // number: after 'e'
    kExpSign,    // number: after the exponent's sign
    kExpDigits,  // number: exponent digits
    kLiteral,    // true / false / null (lit_ and pos_)
    kDone,       // the root value is complete
  };
  bool step(unsigned char c);
  void close_value();  // a value ended: back to the container, or done
  bool in_object() const;
  bool number_end(unsigned char c);  // a byte after a complete number
  // A byte inside a string (key or value) the syntax has taken, to the schema's cursor.
  bool string_byte(unsigned char c, bool starts_char);

  Mode mode_ = Mode::kValue;
  bool object_root_ = true;
  bool key_ = false;
  uint8_t lead_blank_ = 0;
  uint8_t hex_ = 0, lit_ = 0, pos_ = 0;
  uint8_t utf8_left_ = 0, utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // a character's continuation bytes
  uint8_t blank_run_ = 0;                                    // blank bytes in a row
  uint8_t blank_first_ = 0;                                  // the run's first byte
  int16_t depth_ = 0;
  uint64_t stack_[kMaxDepth / 64] = {};  // bit d: level d is an object (else an array)
  SchemaCursor schema_;                  // inactive in JSON mode
};

// A request's JSON constraint over a vocabulary: token t's text is token_bytes[t] (special tokens
// empty); stop ids may end the output only once the object (or with a schema, the value) is
// complete. after_think: the answer
// starts inside a think block (reasoning.h), which is free text; the object follows its
// "</think>" (up to kLeadBlank blank bytes before it), as vLLM starts a grammar after the
// reasoning.
class JsonConstraint {
 public:
  static constexpr int kLeadBlank = 4;  // "</think>\n\n{": Qwen's templates put two newlines
  JsonConstraint(std::shared_ptr<const std::vector<std::string>> token_bytes,
                 std::vector<int32_t> stop_ids, bool after_think = false,
                 std::shared_ptr<const JsonSchema> schema = nullptr);
  // row: f32 [vocab], its ruled-out tokens set to -inf; pending: output tokens after the
  // committed ones (a row after a refused draft is left as it is: it is never used).
  void apply(float* row, int64_t vocab, std::span<const int32_t> pending) const;
  void add(int32_t token);  // one committed output token
  bool complete() const { return !state_.thinking && state_.json.can_end(); }

 private:
  struct Cursor {
    bool thinking = false;  // inside the think block: free text until "</think>"
    uint8_t matched = 0;    // bytes of "</think>" the text ends with
    JsonAutomaton json{true, 0};
  };
  bool take(Cursor& c, int32_t token) const;  // false: refused (c unchanged then)
  std::shared_ptr<const std::vector<std::string>> bytes_;
  // plain_[t]: token t's text is plain_text (inside a string it needs no walk): its characters
  // (at most 65,535), else 0; shared by the constraints of one vocabulary.
  std::shared_ptr<const std::vector<uint16_t>> plain_;
  std::vector<int32_t> stop_ids_;
  std::shared_ptr<const JsonSchema> schema_;  // null: JSON mode (any object)
  Cursor state_;
};

}  // namespace tandem
