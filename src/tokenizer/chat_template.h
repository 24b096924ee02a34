// Chat prompts rendered from a model's own Jinja chat template, with the same inputs
// transformers' apply_chat_template gives it (messages normalised the same way, special-token
// strings, tools, add_generation_prompt, extra kwargs such as enable_thinking).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"

namespace tandem::tok {

// A parsed chat template plus the special-token strings it may refer to.
class ChatTemplate {
 public:
  // Parses the template now, so an unsupported construct is reported before any request.
  explicit ChatTemplate(const std::string& source, const Tokenizer* tokenizer = nullptr);

  // messages: JSON array of {"role", "content", ...}; extra: object of additional template
  // variables ("tools", "documents", "enable_thinking", ...). ordered_json keeps key order, which
  // `tojson` output depends on.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

 private:
  jinja::Template template_;
  jinja::Dict special_tokens_;
};

// Renders with the tokenizer's own chat template (tandem::Error when it has none).
std::string render_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                        bool add_generation_prompt,
                        const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

}  // namespace tandem::tok
