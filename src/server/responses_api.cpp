#include "server/responses_api.h"

#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/openai_render.h"

namespace tandem::server {

namespace {

std::string item_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

const Json* field(const Json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const Json& obj, const char* key, const std::string& param) {
  const Json* v = field(obj, key);
  if (v == nullptr || !v->is_string()) {
    throw bad_request(param + "." + key, fmt::format("'{}' must be a string", key));
  }
  return v->get<std::string>();
}

// A message's or a tool output's content: a string, or text parts (input_text, output_text, text)
// joined. The models served are text-only: images, files and audio are refused.
std::string text_of_content(const Json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw bad_request(param, "content must be a string or an array of content parts");
  }
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string p = fmt::format("{}[{}]", param, j);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      throw bad_request(p, "a content part must be an object with a string 'type'");
    }
    const std::string type = part["type"].get<std::string>();
    if (type == "input_text" || type == "output_text" || type == "text") {
      text += string_field(part, "text", p);
    } else if (type == "refusal") {
      text += string_field(part, "refusal", p);
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      throw bad_request(p + ".type",
                        fmt::format("'{}': this server's model takes text only", type));
    } else {
      throw bad_request(p + ".type", fmt::format("unknown content part type '{}'", type));
    }
  }
  return text;
}

// Items as chat messages, appended: message items by role (developer as system); function_call
// items the assistant's tool_calls (joined to the assistant message before them);
// function_call_output items tool messages. Reasoning items are dropped (the chat template renders
// past turns without their reasoning). `param` names the items in errors.
void append_items(Json& messages, const Json& items, const std::string& param) {
  for (size_t i = 0; i < items.size(); ++i) {
    const Json& item = items[i];
    const std::string p = fmt::format("{}[{}]", param, i);
    if (!item.is_object()) throw bad_request(p, "an input item must be an object");
    std::string type = item.contains("role") ? "message" : "";
    if (item.contains("type")) {
      if (!item["type"].is_string()) throw bad_request(p + ".type", "'type' must be a string");
      type = item["type"].get<std::string>();
    }
    if (type == "message") {
      const std::string role = string_field(item, "role", p);
      if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
        throw bad_request(p + ".role", fmt::format("unknown role '{}'", role));
      }
      if (!item.contains("content")) throw bad_request(p + ".content", "'content' is required");
      messages.push_back({{"role", role == "developer" ? "system" : role},
                          {"content", text_of_content(item["content"], p + ".content")}});
    } else if (type == "function_call") {
      Json call = {{"id", string_field(item, "call_id", p)},
                   {"type", "function"},
                   {"function",
                    {{"name", string_field(item, "name", p)},
                     {"arguments", string_field(item, "arguments", p)}}}};
      if (messages.empty() || messages.back()["role"] != "assistant") {
        messages.push_back({{"role", "assistant"}, {"content", ""}});
      }
      Json& turn = messages.back();
      if (!turn.contains("tool_calls")) turn["tool_calls"] = Json::array();
      turn["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      if (!item.contains("output")) throw bad_request(p + ".output", "'output' is required");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", string_field(item, "call_id", p)},
                          {"content", text_of_content(item["output"], p + ".output")}});
    } else if (type != "reasoning") {
      throw bad_request(p + ".type", fmt::format("input item type '{}' is not supported", type));
    }
  }
}

// `instructions`, the previous response's conversation and `input` as chat messages, in that
// order: instructions a system message first, then the items (append_items).
Json messages_of(const Json& body, const Json& previous_items) {
  Json messages = Json::array();
  if (const Json* ins = field(body, "instructions")) {
    if (!ins->is_string()) throw bad_request("instructions", "'instructions' must be a string");
    if (!ins->get<std::string>().empty()) {
      messages.push_back({{"role", "system"}, {"content", *ins}});
    }
  }
  append_items(messages, previous_items, "previous_response_id");
  const Json* input = field(body, "input");
  if (input == nullptr) throw bad_request("input", "'input' is required");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
    return messages;
  }
  if (!input->is_array() || input->empty()) {
    throw bad_request("input", "'input' must be a string or a non-empty array of input items");
  }
  append_items(messages, *input, "input");
  return messages;
}

// Function tools as chat tools; the others (web search, file search, MCP, ...) are refused.
Json chat_tools_of(const Json& tools) {
  if (!tools.is_array()) throw bad_request("tools", "'tools' must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string p = fmt::format("tools[{}]", i);
    if (!t.is_object()) throw bad_request(p, "a tool must be an object");
    const std::string type = string_field(t, "type", p);
    if (type != "function") {
      throw bad_request(p + ".type",
                        fmt::format("only function tools are supported, got '{}'", type));
    }
    Json fn = {{"name", string_field(t, "name", p)}};
    for (const char* key : {"description", "parameters", "strict"}) {
      if (const Json* v = field(t, key)) fn[key] = *v;
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

Json chat_tool_choice_of(const Json& choice) {
  if (choice.is_string()) return choice;  // auto, none, required: the chat parser checks it
  if (choice.is_object() && choice.contains("type") && choice["type"] == "function") {
    return {{"type", "function"},
            {"function", {{"name", string_field(choice, "name", "tool_choice")}}}};
  }
  throw bad_request("tool_choice",
                    "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": "
                    "\"function\", \"name\": ...}");
}

// text.format as the chat response_format (none for plain text).
Json chat_response_format_of(const Json& text) {
  if (!text.is_object()) throw bad_request("text", "'text' must be an object");
  const Json* format = field(text, "format");
  if (format == nullptr) return nullptr;
  if (!format->is_object()) throw bad_request("text.format", "'format' must be an object");
  const std::string type = string_field(*format, "type", "text.format");
  if (type == "text") return nullptr;
  if (type == "json_object") return {{"type", "json_object"}};
  if (type == "json_schema") {
    Json schema = Json::object();
    for (const char* key : {"name", "schema", "strict", "description"}) {
      if (const Json* v = field(*format, key)) schema[key] = *v;
    }
    return {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  }
  throw bad_request("text.format.type", fmt::format("unknown text format '{}'", type));
}

Json usage_of(const Json& chat_usage) {
  const int64_t in = chat_usage.value("prompt_tokens", int64_t{0});
  const int64_t out = chat_usage.value("completion_tokens", int64_t{0});
  int64_t cached = 0;
  if (const Json* d = field(chat_usage, "prompt_tokens_details")) {
    cached = d->value("cached_tokens", int64_t{0});
  }
  return {{"input_tokens", in},
          {"input_tokens_details", {{"cached_tokens", cached}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", in + out}};
}

// The response object: status, output items, usage (null while in progress).
Json response_json(const ResponsesEcho& e, const std::string& model, const std::string& status,
                   const std::string& incomplete_reason, Json output, Json usage) {
  Json r = {{"id", e.id},
            {"object", "response"},
            {"created_at", e.created_at},
            {"status", status},
            {"background", false},
            {"error", nullptr},
            {"incomplete_details",
             incomplete_reason.empty() ? Json(nullptr) : Json{{"reason", incomplete_reason}}},
            {"model", model},
            {"output", std::move(output)},
            {"previous_response_id", nullptr},
            {"store", false},
            {"usage", std::move(usage)}};
  for (const auto& [k, v] : e.fields.items()) r[k] = v;
  return r;
}

// The response's status and incomplete_details.reason for a chat finish reason.
std::pair<std::string, std::string> status_of(const std::string& finish) {
  if (finish == "stop" || finish == "tool_calls") return {"completed", ""};
  if (finish == "length") return {"incomplete", "max_output_tokens"};
  return {"incomplete", finish};
}

Json message_item(const std::string& id, const std::string& status, const std::string& text,
                  Json logprobs) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", Json::array({{{"type", "output_text"},
                                    {"text", text},
                                    {"annotations", Json::array()},
                                    {"logprobs", std::move(logprobs)}}})}};
}

Json reasoning_item(const std::string& id, const std::string& text) {
  return {{"type", "reasoning"},
          {"id", id},
          {"summary", Json::array()},
          {"content", Json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}

Json function_call_item(const std::string& id, const Json& call, const std::string& status) {
  const Json& fn = call.at("function");
  return {{"type", "function_call"},
          {"id", id},
          {"call_id", call.value("id", "")},
          {"name", fn.value("name", "")},
          {"arguments", fn.value("arguments", "")},
          {"status", status}};
}

}  // namespace

std::optional<std::string> previous_response_id_of(const Json& body) {
  const Json* id = field(body, "previous_response_id");
  if (id == nullptr) return std::nullopt;
  if (!id->is_string()) {
    throw bad_request("previous_response_id", "'previous_response_id' must be a string");
  }
  return id->get<std::string>();
}

Json chat_body_of_responses(const Json& body, ResponsesEcho& echo, const Json& previous_items) {
  Json chat = Json::object();
  for (const char* key :
       {"model", "temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty",
        "presence_penalty", "frequency_penalty", "stop", "stop_token_ids", "ignore_eos",
        "num_speculative_tokens", "min_tokens", "logit_bias", "parallel_tool_calls",
        "skip_special_tokens", "include_stop_str_in_output", "user"}) {
    if (body.contains(key)) chat[key] = body[key];
  }
  for (const char* key : {"conversation", "prompt"}) {
    if (field(body, key) != nullptr) {
      throw bad_request(key, fmt::format("'{}' is not supported: this server stores responses "
                                         "(previous_response_id), not conversations or prompts",
                                         key));
    }
  }
  const std::optional<std::string> previous_id = previous_response_id_of(body);
  if (const Json* s = field(body, "store"); s != nullptr && !s->is_boolean()) {
    throw bad_request("store", "'store' must be a boolean");
  }
  if (const Json* bg = field(body, "background"); bg != nullptr && *bg != false) {
    throw bad_request("background", "background responses are not supported");
  }
  if (const Json* m = field(body, "max_output_tokens")) chat["max_completion_tokens"] = *m;
  if (const Json* s = field(body, "stream")) {
    if (!s->is_boolean()) throw bad_request("stream", "'stream' must be a boolean");
    chat["stream"] = *s;
    if (s->get<bool>()) chat["stream_options"] = {{"include_usage", true}};
  }
  if (const Json* t = field(body, "top_logprobs")) {
    chat["logprobs"] = true;
    chat["top_logprobs"] = *t;
  }
  if (const Json* inc = field(body, "include")) {
    if (!inc->is_array()) throw bad_request("include", "'include' must be an array");
    for (const Json& v : *inc) {
      if (v == "message.output_text.logprobs") chat["logprobs"] = true;
    }
  }
  chat["messages"] = messages_of(body, previous_items);
  if (const Json* tools = field(body, "tools"); tools != nullptr && !tools->empty()) {
    chat["tools"] = chat_tools_of(*tools);
  }
  if (const Json* choice = field(body, "tool_choice")) {
    chat["tool_choice"] = chat_tool_choice_of(*choice);
  }
  if (const Json* text = field(body, "text")) {
    if (Json rf = chat_response_format_of(*text); !rf.is_null()) chat["response_format"] = rf;
  }
  if (const Json* r = field(body, "reasoning"); r != nullptr && !r->is_object()) {
    throw bad_request("reasoning", "'reasoning' must be an object");
  }
  if (const Json* md = field(body, "metadata"); md != nullptr && !md->is_object()) {
    throw bad_request("metadata", "'metadata' must be an object");
  }
  // What the response echoes: the request's values, or the defaults OpenAI reports.
  const auto given = [&](const char* key, Json fallback) {
    const Json* v = field(body, key);
    return v == nullptr ? fallback : *v;
  };
  echo.fields = {{"instructions", given("instructions", nullptr)},
                 {"max_output_tokens", given("max_output_tokens", nullptr)},
                 {"metadata", given("metadata", Json::object())},
                 {"parallel_tool_calls", given("parallel_tool_calls", true)},
                 {"previous_response_id", previous_id ? Json(*previous_id) : Json()},
                 {"reasoning", given("reasoning", Json{{"effort", nullptr}, {"summary", nullptr}})},
                 {"store", given("store", true)},
                 {"temperature", given("temperature", nullptr)},
                 {"text", given("text", Json{{"format", {{"type", "text"}}}})},
                 {"tool_choice", given("tool_choice", "auto")},
                 {"tools", given("tools", Json::array())},
                 {"top_logprobs", given("top_logprobs", 0)},
                 {"top_p", given("top_p", nullptr)},
                 {"truncation", given("truncation", "disabled")},
                 {"user", given("user", nullptr)}};
  echo.id = item_id("resp_");
  echo.created_at = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  return chat;
}

Json response_of_chat(const Json& chat, const ResponsesEcho& echo) {
  const Json& choice = chat.at("choices").at(0);
  const Json& msg = choice.at("message");
  const std::string finish = choice.value("finish_reason", "stop");
  const auto [status, reason] = status_of(finish);
  const std::string item_status = status == "completed" ? "completed" : "incomplete";
  Json output = Json::array();
  if (const Json* r = field(msg, "reasoning_content"); r != nullptr && r->is_string()) {
    output.push_back(reasoning_item(item_id("rs_"), r->get<std::string>()));
  }
  const Json* calls = field(msg, "tool_calls");
  const bool has_calls = calls != nullptr && calls->is_array() && !calls->empty();
  const Json* content = field(msg, "content");
  const std::string text =
      content != nullptr && content->is_string() ? content->get<std::string>() : std::string();
  if (!text.empty() || !has_calls) {
    const Json* lps = field(choice, "logprobs");
    const Json* lp_content = lps != nullptr ? field(*lps, "content") : nullptr;
    output.push_back(message_item(item_id("msg_"), item_status, text,
                                  lp_content != nullptr ? *lp_content : Json::array()));
  }
  if (has_calls) {
    for (const Json& call : *calls) {
      output.push_back(function_call_item(item_id("fc_"), call, "completed"));
    }
  }
  Json r = response_json(echo, chat.value("model", ""), status, reason, std::move(output),
                         usage_of(chat.at("usage")));
  if (chat.contains("speculation")) r["speculation"] = chat["speculation"];
  return r;
}

struct ResponsesStream::State {
  ResponsesEcho echo;
  ResponseCallback on_done;
  std::string model;
  int64_t seq = 0;
  Json output = Json::array();  // finished items, in output order
  // The open items: reasoning, then the message (-1: none open); each's id and text so far.
  int reasoning_index = -1, message_index = -1;
  std::string reasoning_id, reasoning_text, message_id, message_text;
  Json message_logprobs = Json::array();
  bool message_seen = false, calls_seen = false;  // a whole response's message rule (done())
  std::string finish = "stop";
  Json usage = nullptr, speculation = nullptr;
  std::string frames;  // the events of the frame being rewritten

  int next_index() const {
    return static_cast<int>(output.size()) + (reasoning_index >= 0) + (message_index >= 0);
  }
  void event(const std::string& type, Json fields) {
    Json e = {{"type", type}, {"sequence_number", seq++}};
    for (auto& [k, v] : fields.items()) e[k] = std::move(v);
    frames += "event: " + type + "\n" + sse_event(e);
  }
  Json response(const std::string& status, const std::string& reason, Json out, Json use) {
    Json r = response_json(echo, model, status, reason, std::move(out), std::move(use));
    if (!speculation.is_null()) r["speculation"] = speculation;
    return r;
  }
  void close_reasoning() {
    if (reasoning_index < 0) return;
    event("response.reasoning_text.done", {{"item_id", reasoning_id},
                                           {"output_index", reasoning_index},
                                           {"content_index", 0},
                                           {"text", reasoning_text}});
    Json item = reasoning_item(reasoning_id, reasoning_text);
    event("response.output_item.done", {{"output_index", reasoning_index}, {"item", item}});
    output.push_back(std::move(item));
    reasoning_index = -1;
  }
  void open_message() {
    if (message_index >= 0) return;
    message_seen = true;
    message_index = next_index();
    message_id = item_id("msg_");
    event("response.output_item.added", {{"output_index", message_index},
                                         {"item",
                                          {{"type", "message"},
                                           {"id", message_id},
                                           {"status", "in_progress"},
                                           {"role", "assistant"},
                                           {"content", Json::array()}}}});
    event("response.content_part.added", {{"item_id", message_id},
                                          {"output_index", message_index},
                                          {"content_index", 0},
                                          {"part",
                                           {{"type", "output_text"},
                                            {"text", ""},
                                            {"annotations", Json::array()},
                                            {"logprobs", Json::array()}}}});
  }
  void close_message(const std::string& status) {
    if (message_index < 0) return;
    Json item = message_item(message_id, status, message_text, message_logprobs);
    const Json part = item["content"][0];
    event("response.output_text.done", {{"item_id", message_id},
                                        {"output_index", message_index},
                                        {"content_index", 0},
                                        {"text", message_text},
                                        {"logprobs", message_logprobs}});
    event("response.content_part.done", {{"item_id", message_id},
                                         {"output_index", message_index},
                                         {"content_index", 0},
                                         {"part", part}});
    event("response.output_item.done", {{"output_index", message_index}, {"item", item}});
    output.push_back(std::move(item));
    message_index = -1;
  }
  void function_call(const Json& call) {
    calls_seen = true;
    const int index = next_index();
    const std::string id = item_id("fc_");
    Json item = function_call_item(id, call, "in_progress");
    const std::string args = item["arguments"];
    item["arguments"] = "";
    event("response.output_item.added", {{"output_index", index}, {"item", item}});
    event("response.function_call_arguments.delta",
          {{"item_id", id}, {"output_index", index}, {"delta", args}});
    event("response.function_call_arguments.done",
          {{"item_id", id}, {"output_index", index}, {"name", item["name"]}, {"arguments", args}});
    item["arguments"] = args;
    item["status"] = "completed";
    event("response.output_item.done", {{"output_index", index}, {"item", item}});
    output.push_back(std::move(item));
  }
  void chunk(const Json& c) {
    if (model.empty()) model = c.value("model", "");
    if (const Json* u = field(c, "usage")) usage = *u;
    if (const Json* s = field(c, "speculation")) speculation = *s;
    const Json* choices = field(c, "choices");
    if (choices == nullptr || choices->empty()) return;
    const Json& choice = (*choices)[0];
    const Json& delta = choice.value("delta", Json::object());
    if (const Json* r = field(delta, "reasoning_content");
        r != nullptr && r->is_string() && !r->get<std::string>().empty()) {
      close_message("completed");
      if (reasoning_index < 0) {
        reasoning_index = next_index();
        reasoning_id = item_id("rs_");
        event("response.output_item.added", {{"output_index", reasoning_index},
                                             {"item",
                                              {{"type", "reasoning"},
                                               {"id", reasoning_id},
                                               {"summary", Json::array()},
                                               {"content", Json::array()}}}});
      }
      reasoning_text += r->get<std::string>();
      event("response.reasoning_text.delta", {{"item_id", reasoning_id},
                                              {"output_index", reasoning_index},
                                              {"content_index", 0},
                                              {"delta", *r}});
    }
    if (const Json* t = field(delta, "content");
        t != nullptr && t->is_string() && !t->get<std::string>().empty()) {
      close_reasoning();
      open_message();
      Json lps = Json::array();
      if (const Json* l = field(choice, "logprobs")) {
        if (const Json* lc = field(*l, "content")) lps = *lc;
      }
      for (const Json& lp : lps) message_logprobs.push_back(lp);
      message_text += t->get<std::string>();
      event("response.output_text.delta", {{"item_id", message_id},
                                           {"output_index", message_index},
                                           {"content_index", 0},
                                           {"delta", *t},
                                           {"logprobs", std::move(lps)}});
    }
    if (const Json* calls = field(delta, "tool_calls"); calls != nullptr && calls->is_array()) {
      close_reasoning();
      close_message("completed");
      for (const Json& call : *calls) function_call(call);
    }
    if (const Json* f = field(choice, "finish_reason"); f != nullptr && f->is_string()) {
      finish = f->get<std::string>();
      close_reasoning();
      close_message(status_of(finish).first == "completed" ? "completed" : "incomplete");
    }
  }
  void done() {
    const auto [status, reason] = status_of(finish);
    close_reasoning();
    if (!message_seen && !calls_seen) {  // no text: an empty message, as a whole response has
      open_message();
      close_message(status == "completed" ? "completed" : "incomplete");
    }
    Json r = response(status, reason, output, usage.is_null() ? Json() : usage_of(usage));
    if (on_done) on_done(r);
    event(status == "completed" ? "response.completed" : "response.incomplete",
          {{"response", std::move(r)}});
  }
};

ResponsesStream::ResponsesStream(ResponsesEcho echo, ResponseCallback on_done)
    : s_(std::make_unique<State>()) {
  s_->echo = std::move(echo);
  s_->on_done = std::move(on_done);
}
ResponsesStream::~ResponsesStream() = default;

std::string ResponsesStream::rewrite(const std::string& frame) {
  State& s = *s_;
  s.frames.clear();
  if (s.seq == 0) {
    const Json r = s.response("in_progress", "", Json::array(), nullptr);
    s.event("response.created", {{"response", r}});
    s.event("response.in_progress", {{"response", r}});
  }
  if (frame == kSseDone) {
    s.done();
  } else {
    constexpr std::string_view kData = "data: ";
    const std::string_view f(frame);
    if (f.substr(0, kData.size()) == kData) s.chunk(Json::parse(f.substr(kData.size())));
  }
  return std::move(s.frames);
}

}  // namespace tandem::server
