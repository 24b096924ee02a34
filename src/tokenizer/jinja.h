// Public entry of the chat-template interpreter: parse a Jinja template once, render it many
// times with a context of variables. Covers the Jinja subset of HF chat templates (see
// docs/tokenizer.md); an unsupported construct is a tandem::Error naming it and its line.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/jinja_value.h"

namespace tandem::tok::jinja {

struct Node;

class Template {
 public:
  explicit Template(const std::string& source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `context` (a Dict value) as the global variables.
  std::string render(const Value& context) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::tok::jinja
