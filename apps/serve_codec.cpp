// TokenizerCodec (serve_codec.h).
#include "apps/serve_codec.h"

#include "core/error.h"

namespace tandem::app {

TokenizerCodec::TokenizerCodec(tok::Tokenizer tokenizer, std::optional<std::string> chat_template)
    : tokenizer_(std::move(tokenizer)) {
  if (!chat_template) chat_template = tokenizer_.chat_template();
  if (chat_template) template_ = std::make_unique<tok::ChatTemplate>(*chat_template, &tokenizer_);
}

std::vector<int32_t> TokenizerCodec::encode(std::string_view text) const {
  return tokenizer_.encode(text);
}

std::string TokenizerCodec::decode(std::span<const int32_t> ids, bool skip_special) const {
  return tokenizer_.decode(ids, skip_special);
}

std::string TokenizerCodec::token_bytes(int32_t id, bool skip_special) const {
  return std::string(tokenizer_.token_bytes(id, skip_special));
}

int32_t TokenizerCodec::vocab_size() const { return tokenizer_.vocab_size(); }

std::string TokenizerCodec::render_chat(const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra) const {
  TANDEM_CHECK(template_ != nullptr,
               "the model has no chat template (chat_template.jinja or "
               "tokenizer_config.json's chat_template)");
  return template_->render(messages, add_generation_prompt, extra);
}

}  // namespace tandem::app
