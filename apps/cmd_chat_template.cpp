// `tandem chat-template`: renders a conversation with the model's own chat template and prints
// the prompt exactly (no trailing newline added), or its token ids with --ids.
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "apps/cli_common.h"
#include "apps/commands.h"
#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace tandem::app {

namespace {

struct ChatTemplateOptions {
  std::string model_dir, messages_file, tools_file, template_file, enable_thinking;
  bool add_generation_prompt = false;
  bool ids = false;
};

void run_chat_template(const ChatTemplateOptions& o) {
  const tok::Tokenizer t = tok::Tokenizer::from_dir(o.model_dir);
  // --messages holds either the array of messages or a request object {"messages", "tools", ...}.
  nlohmann::ordered_json doc = read_json_file(o.messages_file);
  nlohmann::ordered_json messages, extra = nlohmann::ordered_json::object();
  if (doc.is_object()) {
    TANDEM_CHECK(doc.contains("messages"), "{}: object without \"messages\"", o.messages_file);
    messages = doc["messages"];
    for (const char* key : {"tools", "documents", "enable_thinking"}) {
      if (doc.contains(key)) extra[key] = doc[key];
    }
    if (doc.contains("chat_template_kwargs")) {
      for (auto it = doc["chat_template_kwargs"].begin(); it != doc["chat_template_kwargs"].end();
           ++it) {
        extra[it.key()] = *it;
      }
    }
  } else {
    messages = doc;
  }
  if (!o.tools_file.empty()) extra["tools"] = read_json_file(o.tools_file);
  if (!o.enable_thinking.empty()) {
    TANDEM_CHECK(o.enable_thinking == "true" || o.enable_thinking == "false",
                 "--enable-thinking expects true or false, got '{}'", o.enable_thinking);
    extra["enable_thinking"] = o.enable_thinking == "true";
  }
  std::string prompt;
  if (!o.template_file.empty()) {
    std::ifstream f(o.template_file, std::ios::binary);
    TANDEM_CHECK(f.good(), "cannot read {}", o.template_file);
    std::stringstream ss;
    ss << f.rdbuf();
    prompt = tok::ChatTemplate(ss.str(), &t).render(messages, o.add_generation_prompt, extra);
  } else {
    prompt = tok::render_chat(t, messages, o.add_generation_prompt, extra);
  }
  if (o.ids) {
    std::cout << nlohmann::json(t.encode(prompt)).dump() << '\n';
  } else {
    std::cout << prompt;
  }
}

}  // namespace

void add_chat_template_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("chat-template", "render a conversation with the model's chat template");
  auto o = std::make_shared<ChatTemplateOptions>();
  cmd->add_option("--model", o->model_dir, "model directory (tokenizer_config.json)")->required();
  cmd->add_option("--messages", o->messages_file,
                  "JSON file: array of messages, or {\"messages\", \"tools\", ...}")
      ->required();
  cmd->add_flag("--add-generation-prompt", o->add_generation_prompt,
                "end with the assistant header");
  cmd->add_option("--enable-thinking", o->enable_thinking,
                  "true|false: template variable enable_thinking");
  cmd->add_option("--tools", o->tools_file, "JSON file with the tool definitions array");
  cmd->add_option("--template", o->template_file,
                  "use this Jinja file instead of the model's template");
  cmd->add_flag("--ids", o->ids, "print the prompt's token ids (JSON array) instead of its text");
  cmd->callback([o] { run_chat_template(*o); });
}

}  // namespace tandem::app
