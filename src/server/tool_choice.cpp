// tool_choice "required" and named functions by structured output (tool_choice.h).
#include "server/tool_choice.h"

#include <fmt/format.h>

#include "server/api_error.h"

namespace tandem::server {

namespace {

// A tool's parameters moved to `at` (a JSON pointer) inside a larger schema: its references
// within itself ("#/...") point there.
Json moved_to(const Json& s, const std::string& at) {
  if (s.is_array()) {
    Json out = Json::array();
    for (const Json& v : s) out.push_back(moved_to(v, at));
    return out;
  }
  if (!s.is_object()) return s;
  Json out = Json::object();
  for (auto it = s.begin(); it != s.end(); ++it) {
    const bool ref = it.key() == "$ref" && it->is_string() &&
                     !it->get_ref<const std::string&>().empty() &&
                     it->get_ref<const std::string&>()[0] == '#';
    out[it.key()] = ref ? Json("#" + at + it->get<std::string>().substr(1)) : moved_to(*it, at);
  }
  return out;
}

struct Function {
  std::string name;
  Json parameters;
  std::shared_ptr<const JsonSchema> schema;  // the parameters compiled
};

// The tools' functions (each checked: a function with a name; parameters the compiler takes).
std::vector<Function> functions(const Json& tools) {
  if (!tools.is_array() || tools.empty()) {
    throw bad_request("tool_choice",
                      "'tool_choice' \"required\" or a named function needs a non-empty 'tools'");
  }
  std::vector<Function> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const Json* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      throw bad_request("tools", fmt::format("'tools[{}]' must be {{\"type\": \"function\", "
                                             "\"function\": {{\"name\": ..., \"parameters\": "
                                             "...}}}}",
                                             i));
    }
    const std::string name = (*fn)["name"].get<std::string>();
    Json params = fn->contains("parameters") && !(*fn)["parameters"].is_null()
                      ? (*fn)["parameters"]
                      : Json{{"type", "object"}, {"properties", Json::object()}};
    try {
      auto schema = JsonSchema::compile(params);
      out.push_back({name, std::move(params), std::move(schema)});
    } catch (const JsonSchemaError& e) {
      throw bad_request("tools",
                        fmt::format("'tools[{}]' ({}): its parameters {}", i, name, e.what()));
    }
  }
  return out;
}

}  // namespace

ForcedTools parse_tool_choice(const Json& choice, const Json& tools, bool parallel) {
  ForcedTools f;
  if (choice.is_string()) {
    const std::string& c = choice.get_ref<const std::string&>();
    if (c == "none" || c == "auto") return f;
    if (c != "required") {
      throw bad_request("tool_choice", fmt::format("'tool_choice' must be \"none\", \"auto\", "
                                                   "\"required\" or a named function, got \"{}\"",
                                                   c));
    }
    Json alternatives = Json::array();
    for (const Function& fn : functions(tools)) {
      const std::string at =
          fmt::format("/items/anyOf/{}/properties/parameters", alternatives.size());
      alternatives.push_back(
          {{"type", "object"},
           {"properties",
            {{"name", {{"const", fn.name}}}, {"parameters", moved_to(fn.parameters, at)}}},
           {"required", {"name", "parameters"}}});
    }
    Json schema = {
        {"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(alternatives)}}}};
    if (!parallel) schema["maxItems"] = 1;
    f.mode = ToolForce::kRequired;
    f.schema = JsonSchema::compile(schema);
    return f;
  }
  const Json* fn = choice.is_object() && choice.value("type", "") == "function" &&
                           choice.contains("function") && choice["function"].is_object()
                       ? &choice["function"]
                       : nullptr;
  if (fn == nullptr || !fn->contains("name") || !(*fn)["name"].is_string()) {
    throw bad_request("tool_choice",
                      "'tool_choice' as an object must be {\"type\": \"function\", \"function\": "
                      "{\"name\": ...}}");
  }
  f.name = (*fn)["name"].get<std::string>();
  for (Function& fn : functions(tools)) {
    if (fn.name != f.name) continue;
    f.mode = ToolForce::kNamed;
    f.schema = std::move(fn.schema);
    return f;
  }
  throw bad_request(
      "tool_choice",
      fmt::format("'tool_choice' names function '{}', which is not in 'tools'", f.name));
}

ParsedToolCalls forced_tool_calls(std::string_view text, ToolForce mode, const std::string& name) {
  ParsedToolCalls r;
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (mode == ToolForce::kNamed && !j.is_discarded()) {
    r.calls.push_back({call_id(), name, j.dump()});
  } else if (mode == ToolForce::kRequired && j.is_array()) {
    for (const Json& c : j) {
      if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) continue;
      r.calls.push_back(
          {call_id(), c["name"].get<std::string>(), c.value("parameters", Json::object()).dump()});
    }
  }
  if (r.calls.empty() && !text.empty()) r.content = std::string(text);
  return r;
}

}  // namespace tandem::server
