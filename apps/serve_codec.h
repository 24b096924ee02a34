// The tokenizer behind the server's TextCodec interface (src/server/text_codec.h): the server
// layer may not include the tokenizer, so the command wires it in. Thread-safe: the tokenizer and
// the parsed chat template are only read.
#pragma once

#include <memory>
#include <optional>

#include "server/text_codec.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tandem::app {

class TokenizerCodec final : public server::TextCodec {
 public:
  // Parses the chat template now (`chat_template` when given, else the checkpoint's, if it has
  // one), so that a construct the interpreter does not support is reported at start-up.
  explicit TokenizerCodec(tok::Tokenizer tokenizer,
                          std::optional<std::string> chat_template = std::nullopt);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override;
  std::string token_bytes(int32_t id, bool skip_special) const override;
  int32_t vocab_size() const override;
  std::string render_chat(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                          const nlohmann::ordered_json& extra) const override;
  const tok::Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  tok::Tokenizer tokenizer_;
  std::unique_ptr<tok::ChatTemplate> template_;  // null: the checkpoint has none
};

}  // namespace tandem::app
