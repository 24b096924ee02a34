// The Responses API adapter (server/responses_api.h) on bodies and chat frames made by hand: the
// chat request each Responses request becomes, the errors naming the Responses field, and the
// typed events a chat stream turns into (orders the shipped model never produces: reasoning, then
// text, then calls). The real server's answers against chat completions: test_responses_api.py.
#include "server/responses_api.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/openai_render.h"

namespace tandem::server {
namespace {

std::string param_of(const Json& body) {
  ResponsesEcho echo;
  try {
    chat_body_of_responses(body, echo);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.param;
  }
  return "(accepted)";
}

TEST(ResponsesApi, InputItemsBecomeChatMessages) {
  ResponsesEcho echo;
  const Json chat = chat_body_of_responses(
      {{"model", "m"},
       {"instructions", "Be brief."},
       {"max_output_tokens", 7},
       {"temperature", 0},
       {"input",
        {{{"role", "developer"}, {"content", "Use tools."}},
         {{"role", "user"},
          {"content",
           {{{"type", "input_text"}, {"text", "a"}}, {{"type", "input_text"}, {"text", "b"}}}}},
         {{"type", "message"}, {"role", "assistant"}, {"content", "Let me look."}},
         {{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", "{}"}},
         {{"type", "function_call"}, {"call_id", "c2"}, {"name", "g"}, {"arguments", "{\"x\":1}"}},
         {{"type", "reasoning"}, {"summary", Json::array()}},
         {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "one"}},
         {{"type", "function_call_output"},
          {"call_id", "c2"},
          {"output", {{{"type", "input_text"}, {"text", "two"}}}}}}},
       {"tools",
        {{{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}},
         {{"type", "function"}, {"name", "g"}, {"description", "gee"}}}},
       {"tool_choice", {{"type", "function"}, {"name", "g"}}},
       {"text",
        {{"format", {{"type", "json_schema"}, {"name", "s"}, {"schema", {{"type", "object"}}}}}}}},
      echo);
  const Json want_messages = {
      {{"role", "system"}, {"content", "Be brief."}},
      {{"role", "system"}, {"content", "Use tools."}},
      {{"role", "user"}, {"content", "ab"}},
      {{"role", "assistant"},
       {"content", "Let me look."},
       {"tool_calls",
        {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}},
         {{"id", "c2"},
          {"type", "function"},
          {"function", {{"name", "g"}, {"arguments", "{\"x\":1}"}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "one"}},
      {{"role", "tool"}, {"tool_call_id", "c2"}, {"content", "two"}}};
  EXPECT_EQ(chat["messages"], want_messages);
  EXPECT_EQ(chat["max_completion_tokens"], 7);
  EXPECT_EQ(chat["temperature"], 0);
  EXPECT_EQ(chat["model"], "m");
  EXPECT_EQ(chat["tools"][0],
            (Json{{"type", "function"},
                  {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}));
  EXPECT_EQ(chat["tools"][1]["function"]["description"], "gee");
  EXPECT_EQ(chat["tool_choice"], (Json{{"type", "function"}, {"function", {{"name", "g"}}}}));
  EXPECT_EQ(chat["response_format"]["type"], "json_schema");
  EXPECT_EQ(chat["response_format"]["json_schema"]["name"], "s");
  EXPECT_FALSE(chat.contains("stream"));
  EXPECT_EQ(echo.fields["instructions"], "Be brief.");
  EXPECT_EQ(echo.fields["max_output_tokens"], 7);
  EXPECT_EQ(echo.fields["tool_choice"]["name"], "g");
  EXPECT_EQ(echo.id.rfind("resp_", 0), 0u);
  // A string input is one user message; a stream asks for the usage chunk.
  const Json s = chat_body_of_responses({{"input", "hi"}, {"stream", true}}, echo);
  EXPECT_EQ(s["messages"], (Json{{{"role", "user"}, {"content", "hi"}}}));
  EXPECT_EQ(s["stream_options"], (Json{{"include_usage", true}}));
}

TEST(ResponsesApi, WhatItCannotExpressIsA400NamingTheField) {
  const Json in = {{"input", "x"}};
  auto with = [&](const char* key, Json v) {
    Json b = in;
    b[key] = std::move(v);
    return b;
  };
  EXPECT_EQ(param_of(Json::object()), "input");
  EXPECT_EQ(param_of({{"input", Json::array()}}), "input");
  EXPECT_EQ(param_of({{"input", 3}}), "input");
  EXPECT_EQ(param_of({{"input", {{{"role", "robot"}, {"content", "x"}}}}}), "input[0].role");
  EXPECT_EQ(param_of({{"input", {{{"role", "user"}}}}}), "input[0].content");
  EXPECT_EQ(param_of({{"input", {{{"role", "user"}, {"content", {{{"type", "input_audio"}}}}}}}}),
            "input[0].content[0].type");
  EXPECT_EQ(param_of({{"input", {{{"type", "function_call"}, {"name", "f"}}}}}),
            "input[0].call_id");
  EXPECT_EQ(param_of({{"input", {{{"type", "computer_call"}}}}}), "input[0].type");
  EXPECT_EQ(param_of(with("previous_response_id", 1)), "previous_response_id");
  EXPECT_EQ(param_of(with("store", "yes")), "store");
  EXPECT_EQ(param_of(with("conversation", "c")), "conversation");
  EXPECT_EQ(param_of(with("prompt", {{"id", "p"}})), "prompt");
  EXPECT_EQ(param_of(with("background", true)), "background");
  EXPECT_EQ(param_of(with("stream", "yes")), "stream");
  EXPECT_EQ(param_of(with("tools", {{{"type", "mcp"}}})), "tools[0].type");
  EXPECT_EQ(param_of(with("tools", {{{"type", "function"}}})), "tools[0].name");
  EXPECT_EQ(param_of(with("tool_choice", {{"type", "web_search_preview"}})), "tool_choice");
  EXPECT_EQ(param_of(with("tool_choice", {{"type", 5}})), "tool_choice");  // not a type_error
  EXPECT_EQ(param_of(with("tool_choice", {{"type", "function"}})), "tool_choice.name");
  EXPECT_EQ(param_of(with("text", {{"format", {{"type", "xml"}}}})), "text.format.type");
  EXPECT_EQ(param_of(with("instructions", 5)), "instructions");
  EXPECT_EQ(param_of(with("metadata", "m")), "metadata");
  // Accepted: what is only echoed, and null for the refused ones.
  EXPECT_EQ(param_of(with("previous_response_id", nullptr)), "(accepted)");
  EXPECT_EQ(param_of(with("previous_response_id", "resp_1")), "(accepted)");  // the handler looks
  EXPECT_EQ(param_of(with("store", false)), "(accepted)");
  EXPECT_EQ(param_of(with("background", false)), "(accepted)");
  EXPECT_EQ(param_of(with("reasoning", {{"effort", "low"}})), "(accepted)");
}

// previous_response_id's conversation comes after the instructions, before the input; store and
// previous_response_id are echoed.
TEST(ResponsesApi, APreviousConversationComesBetweenInstructionsAndInput) {
  const Json previous = {{{"type", "message"}, {"role", "user"}, {"content", "one"}},
                         {{"type", "reasoning"}, {"id", "rs_1"}, {"summary", Json::array()}},
                         {{"type", "function_call"},
                          {"id", "fc_1"},
                          {"call_id", "c1"},
                          {"name", "f"},
                          {"arguments", "{}"}}};
  ResponsesEcho echo;
  const Json chat = chat_body_of_responses(
      {{"instructions", "Be brief."},
       {"previous_response_id", "resp_1"},
       {"input", {{{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "two"}}}}},
      echo, previous);
  const Json want = {{{"role", "system"}, {"content", "Be brief."}},
                     {{"role", "user"}, {"content", "one"}},
                     {{"role", "assistant"},
                      {"content", ""},
                      {"tool_calls",
                       {{{"id", "c1"},
                         {"type", "function"},
                         {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}},
                     {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "two"}}};
  EXPECT_EQ(chat["messages"], want);
  EXPECT_EQ(echo.fields["previous_response_id"], "resp_1");
  EXPECT_EQ(echo.fields["store"], true);
  chat_body_of_responses({{"input", "x"}, {"store", false}}, echo);
  EXPECT_EQ(echo.fields["previous_response_id"], nullptr);
  EXPECT_EQ(echo.fields["store"], false);
}

// The events of a stream of chat frames: their types in order.
std::vector<std::string> event_types(const std::string& frames, std::vector<Json>* events) {
  std::vector<std::string> types;
  size_t at = 0;
  while ((at = frames.find("data: ", at)) != std::string::npos) {
    const size_t end = frames.find("\n\n", at);
    const Json e = Json::parse(frames.substr(at + 6, end - at - 6));
    const std::string header = "event: " + e["type"].get<std::string>() + "\n";
    EXPECT_EQ(frames.compare(at - header.size(), header.size(), header), 0) << e["type"];
    types.push_back(e["type"]);
    events->push_back(e);
    at = end;
  }
  return types;
}

Json chunk(Json delta, Json finish = nullptr) {
  return {{"id", "chatcmpl-1"},
          {"object", "chat.completion.chunk"},
          {"model", "m"},
          {"choices", {{{"index", 0}, {"delta", std::move(delta)}, {"finish_reason", finish}}}}};
}

TEST(ResponsesApi, AChatStreamBecomesTypedEventsInOrder) {
  ResponsesEcho echo;
  chat_body_of_responses({{"input", "x"}, {"stream", true}}, echo);
  Json finished;  // what the stream hands to be stored
  int calls = 0;
  ResponsesStream stream(echo, [&](const Json& r) {
    finished = r;
    ++calls;
  });
  std::string out;
  for (const Json& c : {chunk({{"role", "assistant"}, {"content", ""}}),
                        chunk({{"reasoning_content", "th"}}), chunk({{"reasoning_content", "ink"}}),
                        chunk({{"content", "Hel"}}), chunk({{"content", "lo"}}),
                        chunk({{"tool_calls",
                                {{{"index", 0},
                                  {"id", "call_1"},
                                  {"type", "function"},
                                  {"function", {{"name", "f"}, {"arguments", "{\"a\":1}"}}}}}}}),
                        chunk(Json::object(), "tool_calls"),
                        Json{{"id", "chatcmpl-1"},
                             {"model", "m"},
                             {"choices", Json::array()},
                             {"usage", usage_json(5, 9)},
                             {"speculation", {{"draft_tokens", 0}}}}}) {
    out += stream.rewrite(sse_event(c));
  }
  out += stream.rewrite(kSseDone);
  std::vector<Json> events;
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",  // reasoning
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.done",
                                         "response.output_item.done",
                                         "response.output_item.added",  // message
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",  // the call
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(event_types(out, &events), want);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i]["sequence_number"], i);
  EXPECT_EQ(events[2]["output_index"], 0);
  EXPECT_EQ(events[7]["output_index"], 1);
  EXPECT_EQ(events[14]["output_index"], 2);
  EXPECT_EQ(events[11]["text"], "Hello");
  EXPECT_EQ(events[16]["arguments"], "{\"a\":1}");
  const Json& r = events.back()["response"];
  EXPECT_EQ(r["id"], echo.id);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "m");
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "think");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Hello");
  EXPECT_EQ(r["output"][2]["call_id"], "call_1");
  EXPECT_EQ(r["output"][2]["status"], "completed");
  // Each item's done event carries the item the final response holds.
  EXPECT_EQ(events[6]["item"], r["output"][0]);
  EXPECT_EQ(events[13]["item"], r["output"][1]);
  EXPECT_EQ(events[17]["item"], r["output"][2]);
  EXPECT_EQ(r["usage"]["input_tokens"], 5);
  EXPECT_EQ(r["usage"]["output_tokens"], 9);
  EXPECT_EQ(r["usage"]["total_tokens"], 14);
  EXPECT_EQ(r["speculation"]["draft_tokens"], 0);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(finished, r);
}

TEST(ResponsesApi, ALengthFinishIsIncompleteAndAnEmptyAnswerStillHasItsMessage) {
  ResponsesEcho echo;
  chat_body_of_responses({{"input", "x"}}, echo);
  ResponsesStream stream(echo);
  std::string out = stream.rewrite(sse_event(chunk({{"role", "assistant"}, {"content", ""}})));
  out += stream.rewrite(sse_event(chunk(Json::object(), "length")));
  out += stream.rewrite(kSseDone);
  std::vector<Json> events;
  const std::vector<std::string> types = event_types(out, &events);
  ASSERT_FALSE(types.empty());
  EXPECT_EQ(types.back(), "response.incomplete");
  const Json& r = events.back()["response"];
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "");
  // The whole response of the same answer.
  const Json whole = response_of_chat({{"model", "m"},
                                       {"choices",
                                        {{{"index", 0},
                                          {"message", {{"role", "assistant"}, {"content", ""}}},
                                          {"finish_reason", "length"}}}},
                                       {"usage", usage_json(3, 4)}},
                                      echo);
  EXPECT_EQ(whole["status"], "incomplete");
  ASSERT_EQ(whole["output"].size(), 1u);
  EXPECT_EQ(whole["output"][0]["content"][0]["text"], "");
  EXPECT_EQ(whole["usage"]["total_tokens"], 7);
}

}  // namespace
}  // namespace tandem::server
