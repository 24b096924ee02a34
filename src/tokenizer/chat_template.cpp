// render_chat: prepares the template inputs exactly as transformers 5 does before rendering
// (None-valued message keys dropped, reasoning aliased to thinking/reasoning_content, special
// tokens, tools=None when absent) and runs the Jinja interpreter.
#include "tokenizer/chat_template.h"

#include "core/error.h"

namespace tandem::tok {

using nlohmann::ordered_json;

ChatTemplate::ChatTemplate(const std::string& source, const Tokenizer* tokenizer)
    : template_(source) {
  if (tokenizer == nullptr) return;
  auto add = [&](const char* name, const std::optional<std::string>& v) {
    if (v) special_tokens_.set(name, jinja::Value::string(*v));
  };
  add("bos_token", tokenizer->bos_token());
  add("eos_token", tokenizer->eos_token());
  add("unk_token", tokenizer->unk_token());
  add("pad_token", tokenizer->pad_token());
}

namespace {

// transformers' _normalize_chat_messages + _alias_reasoning_fields.
jinja::Value prepare_messages(const ordered_json& messages) {
  TANDEM_CHECK(messages.is_array(), "chat messages must be a JSON array");
  TANDEM_CHECK(!messages.empty(), "cannot apply a chat template to an empty conversation");
  jinja::List out;
  for (const auto& m : messages) {
    TANDEM_CHECK(m.is_object(), "each chat message must be a JSON object, got {}", m.dump());
    ordered_json msg = ordered_json::object();
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it->is_null()) msg[it.key()] = *it;
    }
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      if (!msg.contains(key)) continue;
      ordered_json r = msg[key];
      ordered_json aliased = ordered_json::object();
      aliased["thinking"] = r;
      for (auto it = msg.begin(); it != msg.end(); ++it) aliased[it.key()] = *it;
      aliased["thinking"] = msg.contains("thinking") ? msg["thinking"] : r;
      aliased["reasoning_content"] = r;
      msg = std::move(aliased);
      break;
    }
    out.push_back(jinja::from_json(msg));
  }
  return jinja::Value::new_list(std::move(out));
}

}  // namespace

std::string ChatTemplate::render(const ordered_json& messages, bool add_generation_prompt,
                                 const ordered_json& extra) const {
  TANDEM_CHECK(extra.is_object() || extra.is_null(),
               "chat template extra variables must be an object");
  jinja::Dict ctx = special_tokens_;
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) ctx.set(it.key(), jinja::from_json(*it));
  }
  ctx.set("messages", prepare_messages(messages));
  if (!ctx.find("tools")) ctx.set("tools", jinja::Value::none());
  if (!ctx.find("documents")) ctx.set("documents", jinja::Value::none());
  ctx.set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  return template_.render(jinja::Value::new_dict(std::move(ctx)));
}

std::string render_chat(const Tokenizer& tokenizer, const ordered_json& messages,
                        bool add_generation_prompt, const ordered_json& extra) {
  TANDEM_CHECK(tokenizer.chat_template().has_value(),
               "this model has no chat template (tokenizer_config.json chat_template or "
               "chat_template.jinja)");
  ChatTemplate t(*tokenizer.chat_template(), &tokenizer);
  return t.render(messages, add_generation_prompt, extra);
}

}  // namespace tandem::tok
