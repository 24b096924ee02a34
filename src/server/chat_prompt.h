// A chat request's prompt text: the messages through the model's chat template, with vLLM's
// add_generation_prompt (open the assistant's turn, the default) or continue_final_message (end
// the text at the final message's content, so that the model continues that message: an
// assistant prefix, as transformers' apply_chat_template does it).
#pragma once

#include "server/protocol.h"
#include "server/text_codec.h"

namespace tandem::server {

// Throws ApiError 400 (param "messages") when continue_final_message is set and the final
// message's content (blank space trimmed) is empty or does not appear in the rendered text;
// tandem::Error from the template itself.
std::string render_chat_prompt(const TextCodec& codec, const Json& messages,
                               bool add_generation_prompt, bool continue_final_message,
                               const Json& template_extra);

}  // namespace tandem::server
