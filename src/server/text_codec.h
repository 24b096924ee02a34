// What the server needs of a tokenizer, as an interface: the server layer sits above the engine
// and may not include the tokenizer (scripts/check_layers.sh), so apps/ hands it an adapter
// (apps/serve_codec.h). Tests can pass a fake with chosen token bytes. Implementations must be
// safe to call from many threads at once (const methods, no shared mutable state).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::server {

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // Token ids of UTF-8 text (special tokens written in the text are matched); throws Error on
  // invalid UTF-8.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Text of ids (ill-formed UTF-8 becomes U+FFFD).
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special) const = 0;
  // Raw bytes id contributes to a decode ("" for unknown ids and skipped special tokens); may be
  // part of a UTF-8 character.
  virtual std::string token_bytes(int32_t id, bool skip_special) const = 0;
  virtual int32_t vocab_size() const = 0;
  // The chat prompt of messages through the model's template (throws Error when the template
  // fails or there is none); extra holds further template variables (tools, tool_choice).
  virtual std::string render_chat(const nlohmann::ordered_json& messages,
                                  bool add_generation_prompt,
                                  const nlohmann::ordered_json& extra) const = 0;
};

}  // namespace tandem::server
