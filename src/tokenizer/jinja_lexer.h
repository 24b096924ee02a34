// Lexer for Jinja templates with the settings transformers uses (trim_blocks, lstrip_blocks,
// newlines normalised, one trailing newline dropped): splits source into text, {{ }} and {% %}
// segments, applies whitespace control, and tokenises the expressions inside tags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::tok::jinja {

struct Token {
  enum class Type { kName, kString, kInt, kFloat, kOp, kEnd };
  Type type = Type::kEnd;
  std::string text;  // name, operator, or decoded string literal
  int64_t i = 0;
  double f = 0;
  int line = 0;
};

struct Segment {
  enum class Type { kText, kVar, kBlock };
  Type type;
  int line;
  std::string text;           // kText
  std::vector<Token> tokens;  // kVar / kBlock, ending with a kEnd token
};

std::vector<Segment> lex_template(const std::string& source);

}  // namespace tandem::tok::jinja
