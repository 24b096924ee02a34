// Parsing and validation of the OpenAI request bodies (docs/server.md, "Request fields").
#include "server/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/tool_choice.h"

namespace tandem::server {

namespace {

// OpenAI's logit_bias: {"token id": bias in [-100, 100], ...}; null or {} is none. The key must
// be the id's decimal digits (as OpenAI's and vLLM's clients send it).
std::vector<std::pair<int32_t, float>> parse_logit_bias(const Json& body, int32_t vocab) {
  std::vector<std::pair<int32_t, float>> out;
  const Json* v = find_field(body, "logit_bias");
  if (!v || v->is_null()) return out;
  if (!v->is_object()) wrong_type("logit_bias", "an object of token id -> bias", *v);
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    const std::string param = fmt::format("logit_bias[\"{}\"]", key);
    if (key.empty() || key.size() > 10 ||
        !std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      throw bad_request("logit_bias", fmt::format("logit_bias key '{}' is not a token id", key));
    }
    const int64_t id = std::stoll(key);
    if (id >= vocab) {
      throw bad_request("logit_bias", fmt::format("logit_bias: token id {} is outside the "
                                                  "vocabulary [0, {})",
                                                  id, vocab));
    }
    const double bias = as_number(it.value(), param);
    if (bias < -100 || bias > 100) {
      throw bad_request("logit_bias", fmt::format("logit_bias: the bias of token {} must be in "
                                                  "[-100, 100], got {}",
                                                  id, bias));
    }
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  return out;
}

// One message with its content normalised to a string (text parts joined by newlines, as vLLM
// does for templates that expect strings); other keys (name, tool_calls, ...) are kept.
Json normalise_message(const Json& m, size_t i) {
  const std::string at = fmt::format("messages[{}]", i);
  if (!m.is_object()) wrong_type(at, "an object", m);
  const Json* role = find_field(m, "role");
  if (!role) throw bad_request(at + ".role", fmt::format("'{}.role' is required", at));
  if (!role->is_string()) wrong_type(at + ".role", "a string", *role);
  Json out = m;
  const Json* content = find_field(m, "content");
  if (!content) {  // absent or null (OpenAI clients send null beside tool_calls)
    out["content"] = "";
  } else if (content->is_array()) {
    std::string text;
    for (size_t j = 0; j < content->size(); ++j) {
      const Json& part = (*content)[j];
      const std::string pat = fmt::format("{}.content[{}]", at, j);
      if (!part.is_object()) wrong_type(pat, "an object", part);
      const Json* type = find_field(part, "type");
      const Json* t = find_field(part, "text");
      if (!type || !type->is_string() || type->get<std::string>() != "text" || !t) {
        throw bad_request(pat, fmt::format("'{}' must be a text part ({{\"type\": \"text\", "
                                           "\"text\": ...}}); other content is not supported",
                                           pat));
      }
      if (!t->is_string()) wrong_type(pat + ".text", "a string", *t);
      if (j) text += "\n";
      text += t->get<std::string>();
    }
    out["content"] = text;
  } else if (!content->is_string()) {
    wrong_type(at + ".content", "a string or an array of text parts", *content);
  }
  // An assistant turn's tool calls: OpenAI sends each function's arguments as a JSON string;
  // chat templates iterate them as a mapping (as vLLM hands them over), so a string holding a
  // JSON object becomes that object.
  if (const Json* calls = find_field(m, "tool_calls")) {
    if (!calls->is_array()) wrong_type(at + ".tool_calls", "an array", *calls);
    for (size_t j = 0; j < calls->size(); ++j) {
      const std::string cat = fmt::format("{}.tool_calls[{}]", at, j);
      const Json& c = (*calls)[j];
      const Json* fn = c.is_object() ? find_field(c, "function") : nullptr;
      const Json* name = fn && fn->is_object() ? find_field(*fn, "name") : nullptr;
      if (!name || !name->is_string()) {
        throw bad_request(cat, fmt::format("'{}' must be {{\"type\": \"function\", \"function\": "
                                           "{{\"name\": ..., \"arguments\": ...}}}}",
                                           cat));
      }
      const Json* args = find_field(*fn, "arguments");
      if (args && args->is_string()) {
        Json parsed = Json::parse(args->get<std::string>(), nullptr, false);
        if (!parsed.is_discarded() && parsed.is_object()) {
          out["tool_calls"][j]["function"]["arguments"] = std::move(parsed);
        }
      }
    }
  }
  return out;
}

Json parse_messages(const Json& body) {
  const Json* messages = find_field(body, "messages");
  if (!messages) throw bad_request("messages", "'messages' is required");
  if (!messages->is_array()) wrong_type("messages", "an array", *messages);
  if (messages->empty()) throw bad_request("messages", "'messages' must not be empty");
  Json out = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) out.push_back(normalise_message((*messages)[i], i));
  return out;
}

std::vector<std::string> parse_stop(const Json& body) {
  const Json* stop = find_field(body, "stop");
  if (!stop) return {};
  std::vector<std::string> out;
  auto add = [&](const Json& s, const std::string& param) {
    if (!s.is_string()) wrong_type(param, "a string", s);
    std::string text = s.get<std::string>();
    if (text.empty()) throw bad_request(param, "stop strings must not be empty");
    out.push_back(std::move(text));
  };
  if (stop->is_string()) {
    add(*stop, "stop");
  } else if (stop->is_array()) {
    if (stop->size() > kMaxStopStrings) {
      throw bad_request("stop", fmt::format("'stop' holds at most {} strings, got {}",
                                            kMaxStopStrings, stop->size()));
    }
    for (size_t i = 0; i < stop->size(); ++i) add((*stop)[i], fmt::format("stop[{}]", i));
  } else {
    wrong_type("stop", "a string or an array of strings", *stop);
  }
  return out;
}

// prompt: a string, a list of one string, a list of token ids, or a list of one such list.
// One prompt of a completions request: a non-empty string or list of token ids (param names it).
GenerationRequest::Prompt parse_one_prompt(const Json& v, const std::string& param,
                                           const ProtocolLimits& limits) {
  GenerationRequest::Prompt out;
  if (v.is_string()) {
    if (v.get_ref<const std::string&>().empty()) {
      throw bad_request(param, fmt::format("'{}' must not be empty", param));
    }
    out.text = v.get<std::string>();
    return out;
  }
  if (!v.is_array()) wrong_type(param, "a string or an array of token ids", v);
  out.ids = token_ids(v, param, limits.vocab_size);
  if (out.ids.empty()) throw bad_request(param, fmt::format("'{}' must not be empty", param));
  return out;
}

// "prompt": a string, token ids, or a list of either (a batch of prompts).
void parse_prompt(const Json& body, const ProtocolLimits& limits, GenerationRequest& r) {
  const Json* p = find_field(body, "prompt");
  if (!p) throw bad_request("prompt", "'prompt' is required");
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    if (p->size() > static_cast<size_t>(kMaxPromptChoices)) {
      throw bad_request("prompt", fmt::format("at most {} prompts per request, got {}",
                                              kMaxPromptChoices, p->size()));
    }
    for (size_t i = 0; i < p->size(); ++i) {
      const std::string param = p->size() == 1 ? "prompt" : fmt::format("prompt[{}]", i);
      r.prompts.push_back(parse_one_prompt((*p)[i], param, limits));
    }
    return;
  }
  r.prompts.push_back(parse_one_prompt(*p, "prompt", limits));
}

// vLLM's add_generation_prompt and continue_final_message (chat; /tokenize's messages too).
void parse_chat_prompt_flags(const Json& body, Endpoint endpoint, bool& add_generation_prompt,
                             bool& continue_final_message) {
  add_generation_prompt = get_bool(body, "add_generation_prompt", true);
  continue_final_message = get_bool(body, "continue_final_message", false);
  if (endpoint != Endpoint::kChat && continue_final_message) {
    throw bad_request("continue_final_message",
                      "'continue_final_message' is for chat messages (completions continue "
                      "their prompt)");
  }
  if (add_generation_prompt && continue_final_message) {  // as vLLM
    throw bad_request("continue_final_message",
                      "'continue_final_message' and 'add_generation_prompt' cannot both be true");
  }
}

void parse_logprobs(const Json& body, Endpoint endpoint, GenerationRequest& r) {
  if (const Json* v = find_field(body, "prompt_logprobs"); v && !v->is_null()) {
    if (v->is_boolean()) wrong_type("prompt_logprobs", "an integer", *v);
    const int64_t n = as_int(*v, "prompt_logprobs");
    if (n < 0 || n > kMaxChatTopLogprobs) {
      throw bad_request(
          "prompt_logprobs",
          fmt::format("'prompt_logprobs' must be in [0, {}], got {}", kMaxChatTopLogprobs, n));
    }
    r.prompt_logprobs = static_cast<int>(n);
  }
  if (endpoint == Endpoint::kChat) {
    const bool on = get_bool(body, "logprobs", false);
    const std::optional<int64_t> top = get_int(body, "top_logprobs");
    if (top && (*top < 0 || *top > kMaxChatTopLogprobs)) {
      throw bad_request("top_logprobs", fmt::format("'top_logprobs' must be in [0, {}], got {}",
                                                    kMaxChatTopLogprobs, *top));
    }
    if (top && *top > 0 && !on) {
      throw bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    r.logprobs = on ? static_cast<int>(top.value_or(0)) : -1;
    return;
  }
  const Json* v = find_field(body, "logprobs");
  if (!v) return;
  if (v->is_boolean()) wrong_type("logprobs", "an integer", *v);
  const int64_t n = as_int(*v, "logprobs");
  if (n < 0 || n > kMaxCompletionLogprobs) {
    throw bad_request("logprobs", fmt::format("'logprobs' must be in [0, {}], got {}",
                                              kMaxCompletionLogprobs, n));
  }
  r.logprobs = static_cast<int>(n);
}

// response_format {"type": "json_schema", "json_schema": {"name", "schema", "strict",
// "description"}}: the schema compiled (json_schema.h); a schema it cannot enforce is a 400 that
// says where and why. No schema: any JSON value.
std::shared_ptr<const JsonSchema> parse_json_schema(const Json& rf) {
  const Json* js = find_field(rf, "json_schema");
  if (js == nullptr) {
    throw bad_request("response_format.json_schema",
                      "'response_format.json_schema' is required with type \"json_schema\"");
  }
  if (!js->is_object()) wrong_type("response_format.json_schema", "an object", *js);
  const Json* name = find_field(*js, "name");
  if (name == nullptr || !name->is_string()) {
    throw bad_request("response_format.json_schema.name",
                      "'response_format.json_schema.name' must be a string");
  }
  const Json* schema = find_field(*js, "schema");
  try {
    return JsonSchema::compile(schema != nullptr ? *schema : Json(true));
  } catch (const JsonSchemaError& e) {
    throw bad_request("response_format.json_schema.schema",
                      std::string("'response_format.json_schema.schema' ") + e.what());
  }
}

// vLLM's extra fields for the same constraints: structured_outputs {"json": schema (an object or
// a JSON string), "json_object": true} and the older guided_json; the kinds this server does not
// enforce (regex, choice, grammar, structural_tag and their guided_* forms) are a 400 naming them,
// not an answer without their effect. Combined with a JSON response_format: a 400.
void parse_vllm_structured_outputs(const Json& body, GenerationRequest& r) {
  const auto take_schema = [&](const Json& v, const std::string& param) {
    if (r.json_object) {
      throw bad_request(param, "'" + param + "' cannot be combined with a JSON 'response_format'");
    }
    Json schema = v;
    if (v.is_string()) {
      schema = Json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded()) throw bad_request(param, "'" + param + "' is not valid JSON");
    }
    try {
      r.json_schema = JsonSchema::compile(schema);
    } catch (const JsonSchemaError& e) {
      throw bad_request(param, "'" + param + "' " + e.what());
    }
    r.json_object = true;
  };
  for (const char* unsupported : {"guided_regex", "guided_choice", "guided_grammar"}) {
    if (find_field(body, unsupported)) {
      throw bad_request(unsupported, std::string("'") + unsupported +
                                         "' is not supported (JSON schemas are: guided_json)");
    }
  }
  if (const Json* g = find_field(body, "guided_json")) take_schema(*g, "guided_json");
  if (const Json* so = find_field(body, "structured_outputs")) {
    if (!so->is_object()) wrong_type("structured_outputs", "an object", *so);
    for (const auto& [key, value] : so->items()) {
      if (value.is_null() || (value.is_boolean() && !value.get<bool>())) continue;
      const std::string param = "structured_outputs." + key;
      if (key == "json") {
        take_schema(value, param);
      } else if (key == "json_object") {
        if (r.json_object) throw bad_request(param, "'" + param + "' given twice");
        r.json_object = true;
      } else if (key == "regex" || key == "choice" || key == "grammar" || key == "structural_tag") {
        throw bad_request(param, "'" + param +
                                     "' is not supported (JSON schemas are: "
                                     "structured_outputs.json)");
      }
    }
  }
}

uint64_t random_seed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

}  // namespace

Json parse_body(std::string_view body) {
  check_shape(body);
  Json j;
  try {
    j = Json::parse(body.begin(), body.end());
  } catch (const nlohmann::json::exception& e) {
    throw bad_request({}, fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) throw bad_request({}, "the body must be a JSON object");
  return j;
}

GenerationRequest parse_generation_request(const Json& body, Endpoint endpoint,
                                           const ProtocolLimits& limits) {
  GenerationRequest r;
  r.endpoint = endpoint;
  r.model = limits.served_model;
  if (const Json* m = find_field(body, "model")) {
    if (!m->is_string()) wrong_type("model", "a string", *m);
    if (m->get_ref<const std::string&>() != limits.served_model) {
      throw ApiError(404,
                     fmt::format("The model '{}' does not exist; this server serves '{}'",
                                 m->get<std::string>(), limits.served_model),
                     "invalid_request_error", "model", "model_not_found");
    }
  }
  ForcedTools forced;
  if (endpoint == Endpoint::kChat) {
    r.messages = parse_messages(body);
    if (const Json* tools = find_field(body, "tools")) {
      if (!tools->is_array()) wrong_type("tools", "an array", *tools);
      r.template_extra["tools"] = *tools;
      if (!tools->empty()) r.tools = *tools;
    }
    if (const Json* choice = find_field(body, "tool_choice")) {
      if (!choice->is_string() && !choice->is_object()) {
        wrong_type("tool_choice", "a string or an object", *choice);
      }
      r.template_extra["tool_choice"] = *choice;
      r.tool_choice_none = *choice == "none";
      forced = parse_tool_choice(*choice, r.tools, get_bool(body, "parallel_tool_calls", true));
    }
    if (const Json* kw = find_field(body, "chat_template_kwargs")) {
      if (!kw->is_object()) wrong_type("chat_template_kwargs", "an object", *kw);
      for (auto it = kw->begin(); it != kw->end(); ++it) r.template_extra[it.key()] = it.value();
    }
  } else {
    parse_prompt(body, limits, r);
  }
  if (const std::optional<int64_t> n = get_int(body, "n")) {
    if (*n < 1 || *n > kMaxChoices) {
      throw bad_request("n", fmt::format("'n' must be in [1, {}], got {}", kMaxChoices, *n));
    }
    r.n = static_cast<int>(*n);
  }
  if (r.prompts.size() * static_cast<size_t>(r.n) > static_cast<size_t>(kMaxPromptChoices)) {
    throw bad_request("n", fmt::format("{} prompts x 'n' {} is more than {} choices",
                                       r.prompts.size(), r.n, kMaxPromptChoices));
  }
  const char* max_name = "max_tokens";
  std::optional<int64_t> max_tokens = get_int(body, "max_tokens");
  if (endpoint == Endpoint::kChat) {
    if (std::optional<int64_t> m = get_int(body, "max_completion_tokens")) {
      max_tokens = m;
      max_name = "max_completion_tokens";
    }
  }
  r.echo = get_bool(body, "echo", false);
  const int least = r.echo && endpoint == Endpoint::kCompletion ? 0 : 1;
  if (max_tokens && *max_tokens < least) {
    throw bad_request(max_name,
                      fmt::format("'{}' must be >= {}, got {}", max_name, least, *max_tokens));
  }
  r.max_tokens = max_tokens;

  SamplingParams& s = r.sampling;
  const SamplingDefaults& dflt = limits.defaults;
  s.temperature = static_cast<float>(
      in_range(get_number(body, "temperature"), dflt.temperature, 0, 2, false, "temperature"));
  s.top_p =
      static_cast<float>(in_range(get_number(body, "top_p"), dflt.top_p, 0, 1, true, "top_p"));
  const std::optional<int64_t> k = get_int(body, "top_k");
  if (k && *k < -1) {
    throw bad_request("top_k", fmt::format("'top_k' must be -1, 0 (off) or >= 1, got {}", *k));
  }
  const int64_t top_k = k.value_or(dflt.top_k);
  s.top_k = top_k <= 0 ? 0 : static_cast<int>(std::min<int64_t>(top_k, limits.vocab_size));
  if (const Json* seed = find_field(body, "seed")) {
    if (seed->is_number_unsigned()) {
      s.seed = seed->get<uint64_t>();
    } else {
      s.seed = static_cast<uint64_t>(as_int(*seed, "seed"));
    }
  } else {
    s.seed = random_seed();
  }
  s.presence_penalty = static_cast<float>(
      in_range(get_number(body, "presence_penalty"), 0, -2, 2, false, "presence_penalty"));
  s.frequency_penalty = static_cast<float>(
      in_range(get_number(body, "frequency_penalty"), 0, -2, 2, false, "frequency_penalty"));
  s.repetition_penalty =
      static_cast<float>(in_range(get_number(body, "repetition_penalty"), dflt.repetition_penalty,
                                  0, 2, true, "repetition_penalty"));
  s.logit_bias = parse_logit_bias(body, limits.vocab_size);
  s.min_p =
      static_cast<float>(in_range(get_number(body, "min_p"), dflt.min_p, 0, 1, false, "min_p"));
  if (const std::optional<int64_t> m = get_int(body, "min_tokens")) {
    if (*m < 0) {
      throw bad_request("min_tokens", fmt::format("'min_tokens' must be >= 0, got {}", *m));
    }
    if (max_tokens && *m > *max_tokens) {
      throw bad_request("min_tokens", fmt::format("'min_tokens' ({}) must be <= '{}' ({})", *m,
                                                  max_name, *max_tokens));
    }
    s.min_tokens = static_cast<int>(std::min<int64_t>(*m, std::numeric_limits<int>::max()));
  }
  // Fields that would change the response and that this server does not implement: a 400
  // naming them rather than a response without their effect.
  if (const Json* v = find_field(body, "suffix"); v && *v != "") {
    throw bad_request("suffix", "'suffix' is not supported");
  }
  if (const std::optional<int64_t> b = get_int(body, "best_of"); b && *b != 1) {
    throw bad_request("best_of",
                      fmt::format("'best_of' other than 1 is not supported, got {}", *b));
  }

  r.stop = parse_stop(body);
  if (const Json* ids = find_field(body, "stop_token_ids")) {
    r.stop_token_ids = token_ids(*ids, "stop_token_ids", limits.vocab_size);
  }
  r.ignore_eos = get_bool(body, "ignore_eos", false);
  if (const std::optional<int64_t> k = get_int(body, "num_speculative_tokens")) {
    if (*k < 0) {
      throw bad_request("num_speculative_tokens",
                        fmt::format("'num_speculative_tokens' must be >= 0, got {}", *k));
    }
    r.num_speculative_tokens = static_cast<int>(std::min<int64_t>(*k, 64));
  }
  r.include_stop_str = get_bool(body, "include_stop_str_in_output", false);
  r.skip_special = get_bool(body, "skip_special_tokens", true);
  if (const std::optional<int64_t> t = get_int(body, "truncate_prompt_tokens")) {
    if (*t < 1) {
      throw bad_request("truncate_prompt_tokens",
                        fmt::format("'truncate_prompt_tokens' must be >= 1, got {}", *t));
    }
    r.truncate_prompt_tokens = t;
  }
  parse_chat_prompt_flags(body, endpoint, r.add_generation_prompt, r.continue_final_message);
  parse_logprobs(body, endpoint, r);
  if (const Json* rf = find_field(body, "response_format")) {
    if (!rf->is_object()) wrong_type("response_format", "an object", *rf);
    const Json* type = find_field(*rf, "type");
    const std::string t = type && type->is_string() ? type->get<std::string>() : "";
    if (t != "text" && t != "json_object" && t != "json_schema") {
      throw bad_request("response_format",
                        "'response_format.type' must be \"text\", \"json_object\" or "
                        "\"json_schema\"");
    }
    r.json_object = t != "text";
    if (t == "json_schema") r.json_schema = parse_json_schema(*rf);
  }
  parse_vllm_structured_outputs(body, r);
  if (forced.mode != ToolForce::kNone) {  // the answer is the calls, by their schema
    if (r.json_object) {
      throw bad_request("tool_choice",
                        "'tool_choice' \"required\" or a named function cannot be combined with "
                        "a JSON 'response_format'");
    }
    r.tool_force = forced.mode;
    r.forced_tool = forced.name;
    r.json_object = true;
    r.json_schema = forced.schema;
  }
  r.stream = get_bool(body, "stream", false);
  if (r.stream && r.prompt_logprobs >= 0) {  // as vLLM
    throw bad_request("prompt_logprobs",
                      "'prompt_logprobs' is not available when 'stream' is true");
  }
  if (const Json* so = find_field(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    r.include_usage = get_bool(*so, "include_usage", false);
    r.continuous_usage = r.include_usage && get_bool(*so, "continuous_usage_stats", false);
  }
  return r;
}

TokenizeRequest parse_tokenize_request(const Json& body) {
  TokenizeRequest r;
  const Json* prompt = find_field(body, "prompt");
  const bool has_messages = find_field(body, "messages") != nullptr;
  if ((prompt != nullptr) == has_messages) {
    throw bad_request(prompt ? "messages" : "prompt",
                      "give exactly one of 'prompt' and 'messages'");
  }
  if (prompt) {
    if (!prompt->is_string()) wrong_type("prompt", "a string", *prompt);
    r.prompt = prompt->get<std::string>();
  } else {
    r.messages = parse_messages(body);
  }
  if (!prompt) {
    parse_chat_prompt_flags(body, Endpoint::kChat, r.add_generation_prompt,
                            r.continue_final_message);
  }
  r.add_special_tokens = get_bool(body, "add_special_tokens", true);
  return r;
}

std::vector<int32_t> parse_detokenize_request(const Json& body, const ProtocolLimits& limits) {
  const Json* tokens = find_field(body, "tokens");
  if (!tokens) throw bad_request("tokens", "'tokens' is required");
  return token_ids(*tokens, "tokens", limits.vocab_size);
}

}  // namespace tandem::server
