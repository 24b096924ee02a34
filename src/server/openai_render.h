// The OpenAI response shapes the server writes (docs/server.md, "Responses" and "Streaming"):
// chat.completion, text_completion, their stream chunks, usage, logprobs in each endpoint's
// format, the `speculation` extension field, and SSE framing. JSON is written with invalid UTF-8
// replaced, so that rendering never throws.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "engine/request.h"
#include "server/protocol.h"
#include "server/text_codec.h"

namespace tandem::server {

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletion;
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
};

// Serialises without ever throwing (ill-formed UTF-8 becomes U+FFFD).
std::string dump(const Json& j);
// "data: {json}\n\n"
std::string sse_event(const Json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
Json speculation_json(const GenerationStats& s);

// Logprobs of tokens in the endpoint's format; text_offset: bytes of completion text before the
// first of them (completions only). Chat: {"content": [...]}; completions: {"tokens",
// "token_logprobs", "top_logprobs", "text_offset"}.
Json logprobs_json(Endpoint endpoint, const TextCodec& codec, std::span<const TokenLogprobs> lps,
                   int64_t text_offset = 0);

// A completions response with echo: the prompt's tokens (the first without a logprob, as
// OpenAI's legacy format has it), then the generated ones, offsets running through the prompt's
// text into the completion's. prompt_lps: tokens 1 .. n - 1's.
Json echo_logprobs_json(const TextCodec& codec, std::span<const int32_t> prompt,
                        std::span<const TokenLogprobs> prompt_lps,
                        std::span<const TokenLogprobs> generated);

// vLLM's `prompt_logprobs`: per prompt token a map from token id (a string key) to {"logprob",
// "rank", "decoded_token"} holding the prompt's token and the top_n most likely at its position;
// null for the first token (and for any a request ended before its prompt was scored).
// prompt_lps: tokens 1 .. n - 1's.
Json prompt_logprobs_json(const TextCodec& codec, std::span<const int32_t> prompt,
                          std::span<const TokenLogprobs> prompt_lps, int top_n);

// One choice of a whole response. logprobs: null when not asked for.
struct Choice {
  std::string text;
  std::string finish;
  Json logprobs;
  // Chat: the message's tool_calls (null: none; with calls an empty content is null) and its
  // reasoning_content (none: absent).
  Json tool_calls;
  std::optional<std::string> reasoning;
  // prompt_logprobs_json's (null when not asked for): a completion choice's field, a chat
  // response's top-level field (the first choice's; every choice has the same prompt).
  Json prompt_logprobs;
};

// A whole response: its choices (indices 0, 1, ...), usage, and the `speculation` field of stats.
Json response_json(const ResponseMeta& m, std::span<const Choice> choices, int64_t prompt_tokens,
                   int64_t completion_tokens, const GenerationStats& stats);

// One stream chunk of choice `index` with a text delta (and the assistant role on a chat
// stream's first chunk of the choice); finish: empty while the choice goes on; tool_calls (chat):
// a delta's tool_calls (with their index), or null; reasoning (chat): a reasoning_content delta
// when not empty.
Json chunk_json(const ResponseMeta& m, int index, const std::string& text, bool first,
                const Json& logprobs, const std::string& finish, const Json& tool_calls = nullptr,
                const std::string& reasoning = {});
// The last chunk of stream_options.include_usage: empty choices, usage.
Json usage_chunk_json(const ResponseMeta& m, int64_t prompt_tokens, int64_t completion_tokens);

Json models_json(const std::string& name, int64_t created, int64_t max_model_len);

}  // namespace tandem::server
