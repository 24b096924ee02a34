// The OpenAI request bodies the server accepts, parsed and validated into plain structs: every
// field of docs/server.md with its type and range; anything wrong is an ApiError naming the field
// (400, or 404 for an unknown model). Unknown fields are ignored, as OpenAI does. The body is
// checked for depth and object size before nlohmann parses it, so that hostile input cannot
// exhaust the stack or take quadratic time.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spec/json_schema.h"
#include "spec/sampler.h"

namespace tandem::server {

using Json = nlohmann::ordered_json;

inline constexpr int kMaxStopStrings = 16;
inline constexpr int kMaxChoices = 128;  // `n`, OpenAI's limit
inline constexpr int kMaxChatTopLogprobs = 20;
inline constexpr int kMaxPromptChoices = 256;  // prompts x n in one completions request
inline constexpr int kMaxCompletionLogprobs = 5;
inline constexpr int kMaxJsonDepth = 256;
inline constexpr int64_t kMaxObjectKeys = 4096;

enum class Endpoint { kChat, kCompletion };

enum class ToolForce { kNone, kRequired, kNamed };

// One generation request of either endpoint, before tokenization of a text prompt.
struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletion;
  std::string model;
  // Chat: the messages (content normalised to strings) and template variables (tools, ...).
  Json messages;
  Json template_extra = Json::object();
  // Completions: the prompts (a list of several is a batch: choices prompt 0's n, then prompt
  // 1's, ...), each text or token ids.
  struct Prompt {
    std::optional<std::string> text;
    std::vector<int32_t> ids;
  };
  std::vector<Prompt> prompts;
  std::optional<int64_t> max_tokens;  // absent: the rest of the context
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // `num_speculative_tokens` (this server's): the most draft tokens a step for this request, at
  // most the server's --num-speculative-tokens (-1: the server's; 0: no speculation).
  int num_speculative_tokens = -1;
  int logprobs = -1;  // -1 off, else top alternatives per token (Request::logprobs)
  // vLLM's `prompt_logprobs` (both endpoints, not streamed): -1 off, else every prompt token's
  // logprob, vocab rank and the top alternatives at its position (Request::prompt_logprobs).
  int prompt_logprobs = -1;
  // Completions: the response's text (and logprobs) start with the prompt's; max_tokens may then
  // be 0 (the prompt alone, as lm-eval's loglikelihood asks). Chat (vLLM's): the answer's content
  // starts with the final message's when that is the assistant's (continue_final_message).
  bool echo = false;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM's): usage per chunk
  int n = 1;  // choices: one engine request each, choice i sampling with seed + i
  // vLLM's: the stop string (or stop token's text) that ended generation stays in the text;
  // special tokens' text in the output (skip_special_tokens false); only the prompt's last
  // truncate_prompt_tokens tokens.
  bool include_stop_str = false;
  bool skip_special = true;
  std::optional<int64_t> truncate_prompt_tokens;
  // Chat (chat_prompt.h): open the assistant's turn (default), or continue the final message.
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // Chat: the request's tools (null when none) and whether tool_choice is "none" (then generated
  // text is never read as tool calls).
  Json tools;
  bool tool_choice_none = false;
  // tool_choice "required" or a named function: the answer is forced by a JSON schema (json_schema
  // below) and read back as calls (server/tool_choice.h); forced_tool names the function.
  ToolForce tool_force = ToolForce::kNone;
  std::string forced_tool;
  bool json_object = false;  // response_format {"type": "json_object"} or "json_schema"
  std::shared_ptr<const JsonSchema> json_schema;  // response_format "json_schema": the schema
};

struct TokenizeRequest {
  std::optional<std::string> prompt;
  Json messages;  // when prompt is absent
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = true;
};

// Parses a body into JSON: 400 for malformed JSON, invalid UTF-8, too deep or too wide a body,
// or a top level that is not an object.
Json parse_body(std::string_view body);

// The values of sampling fields a request leaves out: OpenAI's, or those the model's
// generation_config.json recommends (vLLM's `--generation-config auto`, its default).
struct SamplingDefaults {
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, repetition_penalty = 1.0;
  int64_t top_k = 0;  // 0: off
  std::optional<int64_t>
      max_tokens;  // max_new_tokens: a cap on the default (the rest of the context)
};

// The defaults a generation_config.json gives (the keys vLLM reads: temperature, top_p, top_k,
// min_p, repetition_penalty, max_new_tokens; the others are ignored). A value of the wrong type or
// range: Error naming `source` and the key.
SamplingDefaults sampling_defaults_from(const Json& generation_config, const std::string& source);
// "temperature 0.6, top_k 20, top_p 0.95" (the fields that differ from OpenAI's), or "none".
std::string describe(const SamplingDefaults& d);

// What the validation needs to know of the server: the only accepted `model` (absent means it
// too, as in vLLM), the vocabulary size token ids must stay below, and the sampling defaults.
struct ProtocolLimits {
  std::string served_model;
  int32_t vocab_size = 0;
  SamplingDefaults defaults;
};

GenerationRequest parse_generation_request(const Json& body, Endpoint endpoint,
                                           const ProtocolLimits& limits);
TokenizeRequest parse_tokenize_request(const Json& body);
std::vector<int32_t> parse_detokenize_request(const Json& body, const ProtocolLimits& limits);

}  // namespace tandem::server
