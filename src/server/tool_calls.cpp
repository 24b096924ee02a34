// Tool-call parsing of generated chat text (tool_calls.h).
#include "server/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <random>

#include "core/error.h"
#include "server/text_stream.h"

namespace tandem::server {

namespace {

constexpr std::string_view kStart = "<tool_call>", kEnd = "</tool_call>";
constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>";
constexpr std::string_view kParameter = "<parameter=", kParameterEnd = "</parameter>";

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The JSON schema type of parameter `param` of function `fn` in the request's tools ("string"
// when the tool or the parameter is not described; the first non-null type of a type list).
std::string param_type(const Json& tools, const std::string& fn, const std::string& param) {
  if (!tools.is_array()) return "string";
  for (const Json& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const Json& f = t["function"];
    if (!f.contains("name") || f["name"] != fn) continue;
    if (!f.contains("parameters") || !f["parameters"].is_object()) return "string";
    const Json& props = f["parameters"].value("properties", Json::object());
    if (!props.is_object() || !props.contains(param) || !props[param].is_object()) return "string";
    const Json& type = props[param].value("type", Json("string"));
    if (type.is_string()) return type.get<std::string>();
    if (type.is_array()) {
      for (const Json& x : type) {
        if (x.is_string() && x != "null") return x.get<std::string>();
      }
    }
    return "string";
  }
  return "string";
}

bool starts_with_any(const std::string& s, std::initializer_list<std::string_view> prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&](std::string_view p) { return s.rfind(p, 0) == 0; });
}

// A qwen3_coder parameter's text as its schema type says (vLLM's conversion).
Json typed_value(const std::string& value, const std::string& type_name) {
  if (lower(value) == "null") return nullptr;
  const std::string type = lower(type_name);
  if (type == "string" || type == "str" || type == "text" || type == "varchar" || type == "char" ||
      type == "enum") {
    return value;
  }
  // Numbers and booleans read as Python's int(), float() and comparisons do: blank space around
  // them does not matter.
  const std::string bare(trim(value));
  if (starts_with_any(type, {"int", "uint", "long", "short", "unsigned"})) {
    int64_t v = 0;
    const char* end = bare.data() + bare.size();
    const auto [p, ec] = std::from_chars(bare.data(), end, v);
    return ec == std::errc() && p == end && !bare.empty() ? Json(v) : Json(value);
  }
  if (starts_with_any(type, {"num", "float", "double"})) {
    char* end = nullptr;
    const double v = std::strtod(bare.c_str(), &end);
    if (bare.empty() || end != bare.c_str() + bare.size() || !std::isfinite(v)) return value;
    if (v == std::trunc(v) && std::fabs(v) < 9.0e15) return Json(static_cast<int64_t>(v));
    return v;
  }
  if (type == "boolean" || type == "bool" || type == "binary") {
    const std::string l = lower(bare);
    if (l == "true" || l == "false") return l == "true";
    return value;
  }
  const Json parsed = Json::parse(value, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? Json(value) : parsed;
}

// One value's text: one leading and one trailing newline dropped (the format's layout).
std::string param_text(std::string_view v) {
  if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
  if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
  return std::string(v);
}

// The functions of one qwen3_coder block; false when it holds none or one is malformed.
bool qwen3_functions(std::string_view body, const Json& tools, std::vector<ToolCall>& out) {
  size_t pos = body.find(kFunction);
  if (pos == std::string_view::npos) return false;
  while (pos != std::string_view::npos) {
    const size_t name_at = pos + kFunction.size();
    const size_t gt = body.find('>', name_at);
    if (gt == std::string_view::npos) return false;
    const std::string name(trim(body.substr(name_at, gt - name_at)));
    if (name.empty()) return false;
    size_t end = body.find(kFunctionEnd, gt);
    const size_t next = body.find(kFunction, gt);
    if (end == std::string_view::npos || (next != std::string_view::npos && next < end)) {
      end = next == std::string_view::npos ? body.size() : next;  // cut off: up to what follows
    }
    std::string_view fn = body.substr(gt + 1, end - gt - 1);
    Json args = Json::object();
    size_t p = fn.find(kParameter);
    while (p != std::string_view::npos) {
      const size_t key_at = p + kParameter.size();
      const size_t kgt = fn.find('>', key_at);
      if (kgt == std::string_view::npos) return false;
      const std::string key(trim(fn.substr(key_at, kgt - key_at)));
      // The value ends at </parameter>, or at the next parameter or the function's end.
      size_t vend = fn.find(kParameterEnd, kgt);
      const size_t np = fn.find(kParameter, kgt);
      if (vend == std::string_view::npos || (np != std::string_view::npos && np < vend)) {
        vend = np == std::string_view::npos ? fn.size() : np;
      }
      args[key] =
          typed_value(param_text(fn.substr(kgt + 1, vend - kgt - 1)), param_type(tools, name, key));
      p = fn.find(kParameter, vend);
    }
    out.push_back({call_id(), name, args.dump()});
    pos = end < body.size() ? body.find(kFunction, end) : std::string_view::npos;
  }
  return true;
}

// One hermes block: {"name": ..., "arguments": {...}}.
bool hermes_call(std::string_view body, std::vector<ToolCall>& out) {
  const Json j = Json::parse(trim(body), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) {
    return false;
  }
  const Json args = j.value("arguments", Json::object());
  out.push_back({call_id(), j["name"].get<std::string>(),
                 args.is_string() ? args.get<std::string>() : args.dump()});
  return true;
}

}  // namespace

std::string call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

ToolCallFormat parse_tool_call_format(std::string_view name) {
  if (name == "qwen3_coder") return ToolCallFormat::kQwen3Coder;
  if (name == "hermes") return ToolCallFormat::kHermes;
  fail(
      "unknown tool-call parser '{}' (choose qwen3_coder for Qwen3.5 / Qwen3-Next, hermes for "
      "Qwen2.5 / Qwen3)",
      name);
}

ParsedToolCalls parse_tool_calls(std::string_view text, ToolCallFormat format, const Json& tools) {
  ParsedToolCalls r;
  const size_t first = text.find(kStart);
  const auto whole = [&] {
    ParsedToolCalls all;
    if (!text.empty()) all.content = std::string(text);
    return all;
  };
  if (format == ToolCallFormat::kNone || first == std::string_view::npos) return whole();
  for (size_t pos = first; pos != std::string_view::npos;) {
    const size_t body_at = pos + kStart.size();
    const size_t end = text.find(kEnd, body_at);
    const std::string_view body = text.substr(
        body_at, end == std::string_view::npos ? std::string_view::npos : end - body_at);
    const bool ok = format == ToolCallFormat::kQwen3Coder ? qwen3_functions(body, tools, r.calls)
                                                          : hermes_call(body, r.calls);
    if (!ok) return whole();
    pos = end == std::string_view::npos ? end : text.find(kStart, end + kEnd.size());
  }
  if (first > 0) r.content = std::string(text.substr(0, first));
  return r;
}

Json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c = Json::object();
    if (with_index) c["index"] = i;
    c["id"] = calls[i].id;
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(c));
  }
  return out;
}

std::string ToolCallStream::push(std::string_view text) {
  held_.append(text);
  if (in_call_) return {};
  if (const size_t at = held_.find(kStart); at != std::string::npos) {
    std::string out = held_.substr(0, at);
    held_.erase(0, at);
    in_call_ = true;
    sent_ += out;
    return out;
  }
  // Keep the longest end of the text that could begin "<tool_call>".
  const size_t keep = partial_tag(held_, kStart);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  sent_ += out;
  return out;
}

ParsedToolCalls ToolCallStream::finish() {
  ParsedToolCalls r;
  if (in_call_) r = parse_tool_calls(sent_ + held_, format_, tools_);
  if (r.calls.empty()) {  // no call: the held text is content
    r.content = held_.empty() ? std::nullopt : std::optional<std::string>(held_);
  } else {
    r.content.reset();  // the content before the calls has been sent
  }
  held_.clear();
  return r;
}

}  // namespace tandem::server
