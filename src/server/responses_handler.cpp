// POST /v1/responses (responses_api.h): the previous response's conversation looked up, the request
// translated (responses_api.cpp) and run as a chat completion, its answer returned as a response
// and, with `store`, kept in the ResponseStore (response_store.h), streamed or not.
#include <cctype>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "server/api_error.h"
#include "server/openai_render.h"
#include "server/response_store.h"
#include "server/responses_api.h"

namespace tandem::server {

namespace {

// Replaces the whole-word occurrences of `word` in text (word characters: alphanumerics, '_').
std::string replace_word(std::string text, std::string_view word, std::string_view by) {
  const auto is_word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at)) {
    const size_t end = at + word.size();
    if ((at > 0 && is_word(text[at - 1])) || (end < text.size() && is_word(text[end]))) {
      at = end;
      continue;
    }
    text.replace(at, word.size(), by);
    at += by.size();
  }
  return text;
}

// A chat request's error as the Responses request names its fields.
ApiError renamed(const ApiError& e) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"max_completion_tokens", "max_output_tokens"},
      {"max_tokens", "max_output_tokens"},
      {"messages", "input"},
      {"response_format", "text.format"}};
  std::string param = e.param, message = e.what();
  for (const auto& [chat, responses] : kNames) {
    if (param == chat) param = responses;
    message = replace_word(std::move(message), chat, responses);
  }
  return ApiError(e.status, message, e.type, param, e.code);
}

}  // namespace

void handle_responses(const HandlerContext& ctx, std::string_view raw, httplib::Response& res) {
  const Json body = parse_body(raw);
  // The conversation so far: the previous response's, then this request's input.
  std::shared_ptr<const StoredResponse> previous;
  if (const std::optional<std::string> id = previous_response_id_of(body)) {
    previous = stored_or_404(ctx.responses, *id, "invalid_request_error", "previous_response_id");
  }
  ResponsesEcho echo;
  const Json chat =
      chat_body_of_responses(body, echo, previous ? conversation_of(*previous) : Json::array());
  const bool store = echo.fields["store"].get<bool>() && ctx.responses.enabled();
  echo.fields["store"] = store;
  // A finished response, stored with its turn's items (one that ended in an engine error is not).
  ResponseCallback keep;
  if (store) {
    keep = [&responses = ctx.responses, previous,
            input = input_items_of(body.at("input"))](const Json& response) {
      if (const Json& why = response.at("incomplete_details");
          why.is_object() && why.value("reason", "") == "error") {
        return;
      }
      StoredResponse entry{.response = response, .previous = previous, .items = input};
      for (const Json& item : response.at("output")) entry.items.push_back(item);
      responses.put(std::move(entry));
    };
  }
  const bool stream = chat.value("stream", false);
  try {
    if (!stream) {
      handle_generation(ctx, Endpoint::kChat, dump(chat), res);
      if (res.status == 200) {
        const Json response = response_of_chat(Json::parse(res.body), echo);
        res.set_content(dump(response), "application/json");
        if (keep) keep(response);
      }
      access_record().id = echo.id;
      return;
    }
    auto adapter = std::make_shared<ResponsesStream>(echo, std::move(keep));
    handle_generation(ctx, Endpoint::kChat, dump(chat), res,
                      [adapter](const std::string& frame) { return adapter->rewrite(frame); });
    access_record().id = echo.id;
  } catch (const ApiError& e) {
    throw renamed(e);
  }
}

}  // namespace tandem::server
