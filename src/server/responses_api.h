// POST /v1/responses (OpenAI's Responses API, as vLLM serves it) as an adapter over chat
// completions: the request's `input` items and `instructions` become chat messages (its tools,
// tool_choice, text.format and sampling fields their chat counterparts), the chat completion runs
// as POST /v1/chat/completions would run it, and its answer comes back as a `response` object, or
// streamed as the Responses API's typed events. With `store` (default true) the response and its
// conversation are kept in memory (response_store.h), for `previous_response_id` and
// GET / DELETE /v1/responses/{id}. docs/server.md, "The Responses API".
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/handler_context.h"
#include "server/protocol.h"

namespace tandem::server {

// What a response echoes of its request (instructions, max_output_tokens, tools, ...).
struct ResponsesEcho {
  Json fields = Json::object();
  std::string id;  // resp_...
  int64_t created_at = 0;
};

// The request's previous_response_id (none when absent or null); ApiError 400 when not a string.
std::optional<std::string> previous_response_id_of(const Json& body);

// A Responses request as the chat completion body that computes it (the fields the chat parser
// validates pass through under their chat names), and what its response echoes (`store` as asked:
// the handler clears it when the server stores nothing). previous_items, the stored conversation
// of previous_response_id, come between the instructions and the input. ApiError (400) naming the
// Responses field for anything it cannot express.
Json chat_body_of_responses(const Json& body, ResponsesEcho& echo,
                            const Json& previous_items = Json::array());

// The `response` object of a finished chat.completion (one choice).
Json response_of_chat(const Json& chat_completion, const ResponsesEcho& echo);

// The Responses API's events for a chat completion's SSE frames, one frame at a time (the
// FrameRewriter of handle_generation): response.created and response.in_progress first; then
// per output item (reasoning, the message, each function call) its added, delta, done events;
// response.completed (or response.incomplete) in place of the chat stream's [DONE]; on_done, when
// given, is called with that event's response first.
using ResponseCallback = std::function<void(const Json& response)>;
class ResponsesStream {
 public:
  explicit ResponsesStream(ResponsesEcho echo, ResponseCallback on_done = {});
  ~ResponsesStream();
  ResponsesStream(const ResponsesStream&) = delete;
  ResponsesStream& operator=(const ResponsesStream&) = delete;
  std::string rewrite(const std::string& chat_frame);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// POST /v1/responses (responses_handler.cpp).
void handle_responses(const HandlerContext& ctx, std::string_view body, httplib::Response& res);

}  // namespace tandem::server
