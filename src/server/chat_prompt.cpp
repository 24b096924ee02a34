// A chat request's prompt text (chat_prompt.h).
#include "server/chat_prompt.h"

#include "server/api_error.h"

namespace tandem::server {

std::string render_chat_prompt(const TextCodec& codec, const Json& messages,
                               bool add_generation_prompt, bool continue_final_message,
                               const Json& template_extra) {
  std::string text = codec.render_chat(messages, add_generation_prompt, template_extra);
  if (!continue_final_message) return text;
  const Json& last = messages.back();  // (parse_messages: at least one message)
  std::string content = last.contains("content") && last["content"].is_string()
                            ? last["content"].get<std::string>()
                            : std::string();
  const size_t first = content.find_first_not_of(" \t\r\n");
  content = first == std::string::npos
                ? std::string()
                : content.substr(first, content.find_last_not_of(" \t\r\n") - first + 1);
  const size_t at = content.empty() ? std::string::npos : text.rfind(content);
  if (at == std::string::npos) {
    throw bad_request("messages",
                      content.empty()
                          ? "'continue_final_message' needs a final message with content"
                          : "'continue_final_message' is set but the final message's content does "
                            "not appear in the chat template's text");
  }
  text.resize(at + content.size());
  return text;
}

}  // namespace tandem::server
