// OpenAI rendering and SSE framing (server/openai_render.h): the shapes docs/server.md promises,
// each endpoint's logprobs format, and serialisation that never throws.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fake_codec.h"
#include "server/api_error.h"
#include "server/openai_render.h"

namespace tandem::server {
namespace {

const ResponseMeta kChat{
    .endpoint = Endpoint::kChat, .id = "chatcmpl-1", .created = 5, .model = "m"};
const ResponseMeta kCompletion{
    .endpoint = Endpoint::kCompletion, .id = "cmpl-1", .created = 5, .model = "m"};

TEST(Sse, FramingIsOneDataLinePerEvent) {
  const std::string e = sse_event(Json{{"a", "line1\nline2"}, {"b", 1}});
  ASSERT_GE(e.size(), 8u);
  EXPECT_EQ(e.rfind("data: ", 0), 0u);
  EXPECT_EQ(e.substr(e.size() - 2), "\n\n");
  // A newline in the text is escaped: the event is a single line.
  EXPECT_EQ(e.find('\n'), e.size() - 2);
  EXPECT_EQ(Json::parse(e.substr(6)), (Json{{"a", "line1\nline2"}, {"b", 1}}));
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
}

TEST(Render, DumpReplacesIllFormedUtf8InsteadOfThrowing) {
  const Json j = {{"text", std::string("a\xFF"
                                       "b")}};
  std::string out;
  ASSERT_NO_THROW(out = dump(j));
  EXPECT_EQ(out,
            "{\"text\":\"a\xEF\xBF\xBD"
            "b\"}");
}

TEST(Render, ChatResponseShape) {
  GenerationStats st;
  st.drafting_steps = 4;
  st.draft_tokens = 12;
  st.accepted_tokens = 6;
  const std::vector<Choice> one{{"hello", "stop", nullptr}};
  const Json r = response_json(kChat, one, 7, 3, st);
  EXPECT_EQ(r["id"], "chatcmpl-1");
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["created"], 5);
  EXPECT_EQ(r["model"], "m");
  ASSERT_EQ(r["choices"].size(), 1u);
  EXPECT_EQ(r["choices"][0]["index"], 0);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "hello");
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"],
            (Json{{"prompt_tokens", 7}, {"completion_tokens", 3}, {"total_tokens", 10}}));
  EXPECT_EQ(r["speculation"]["draft_tokens"], 12);
  EXPECT_EQ(r["speculation"]["accepted_tokens"], 6);
  EXPECT_EQ(r["speculation"]["drafting_steps"], 4);
  EXPECT_DOUBLE_EQ(r["speculation"]["mean_acceptance_length"].get<double>(), 2.5);
}

// Tool calls: the message's content null when empty, tool_calls beside it; stream deltas carry
// them with their index.
TEST(Render, ToolCallsInMessagesAndDeltas) {
  const Json calls = Json::parse(
      R"([{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}])");
  const std::vector<Choice> two{{"", "tool_calls", nullptr, calls},
                                {"Sure.", "tool_calls", nullptr, calls}};
  const Json r = response_json(kChat, two, 7, 3, GenerationStats{});
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"], calls);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(r["choices"][1]["message"]["content"], "Sure.");
  const std::vector<Choice> plain{{"", "stop", nullptr}};
  const Json p = response_json(kChat, plain, 1, 1, GenerationStats{});
  EXPECT_EQ(p["choices"][0]["message"]["content"], "");  // no calls: an empty string
  EXPECT_FALSE(p["choices"][0]["message"].contains("tool_calls"));
  Json indexed = calls;
  indexed[0]["index"] = 0;
  const Json c = chunk_json(kChat, 0, "", false, nullptr, "", indexed);
  EXPECT_EQ(c["choices"][0]["delta"], (Json{{"tool_calls", indexed}}));
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
}

// Reasoning: message.reasoning_content beside the content ("" kept: the answer had a think
// block), absent when none; a delta's reasoning_content when it has some.
TEST(Render, ReasoningContentInMessagesAndDeltas) {
  const std::vector<Choice> c{{"Paris.", "stop", nullptr, nullptr, "think"},
                              {"x", "stop", nullptr, nullptr, ""},
                              {"y", "stop", nullptr}};
  const Json r = response_json(kChat, c, 1, 1, GenerationStats{});
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "think");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Paris.");
  EXPECT_EQ(r["choices"][1]["message"]["reasoning_content"], "");
  EXPECT_FALSE(r["choices"][2]["message"].contains("reasoning_content"));
  const Json d = chunk_json(kChat, 0, "", false, nullptr, "", nullptr, "hmm");
  EXPECT_EQ(d["choices"][0]["delta"], (Json{{"reasoning_content", "hmm"}}));
  const Json both = chunk_json(kChat, 0, "a", false, nullptr, "", nullptr, "b");
  EXPECT_EQ(both["choices"][0]["delta"], (Json{{"content", "a"}, {"reasoning_content", "b"}}));
}

TEST(Render, CompletionResponseAndChunks) {
  const std::vector<Choice> two{{"t", "length", nullptr}, {"u", "stop", nullptr}};
  const Json r = response_json(kCompletion, two, 1, 2, {});
  EXPECT_EQ(r["object"], "text_completion");
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][0]["text"], "t");
  EXPECT_EQ(r["choices"][1]["index"], 1);
  EXPECT_EQ(r["choices"][1]["text"], "u");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "stop");
  EXPECT_FALSE(r["choices"][0].contains("message"));
  EXPECT_DOUBLE_EQ(r["speculation"]["mean_acceptance_length"].get<double>(), 1.0);

  const Json c = chunk_json(kCompletion, 3, "piece", false, nullptr, "");
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["index"], 3);
  EXPECT_EQ(c["choices"][0]["text"], "piece");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());

  const Json first = chunk_json(kChat, 0, "", true, nullptr, "");
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  const Json next = chunk_json(kChat, 0, "x", false, nullptr, "");
  EXPECT_FALSE(next["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(next["choices"][0]["delta"]["content"], "x");
  const Json last = chunk_json(kChat, 0, "", false, nullptr, "abort");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "abort");
  EXPECT_EQ(last["choices"][0]["delta"], Json::object());

  const Json u = usage_chunk_json(kChat, 4, 5);
  EXPECT_TRUE(u["choices"].is_array());
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 9);
}

TEST(Render, LogprobsInEachEndpointsFormat) {
  const testing::FakeCodec codec({"a", "\xC3", "<s>"}, {2});
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<TokenLogprobs> lps = {
      {.chosen = {0, -0.5f}, .top = {{0, -0.5f}, {1, -1.5f}}},
      {.chosen = {1, ninf}, .top = {}},
  };
  const Json chat = logprobs_json(Endpoint::kChat, codec, lps);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], "a");
  EXPECT_DOUBLE_EQ(chat["content"][0]["logprob"].get<double>(), -0.5);
  EXPECT_EQ(chat["content"][0]["bytes"], Json::array({97}));
  ASSERT_EQ(chat["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["bytes"], Json::array({0xC3}));
  // A partial character: its bytes are exact, its text valid UTF-8; -inf is written as -9999.
  EXPECT_EQ(chat["content"][1]["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(chat["content"][1]["bytes"], Json::array({0xC3}));
  EXPECT_DOUBLE_EQ(chat["content"][1]["logprob"].get<double>(), -9999.0);
  EXPECT_NO_THROW(dump(chat));

  const Json comp = logprobs_json(Endpoint::kCompletion, codec, lps, 10);
  EXPECT_EQ(comp["tokens"], Json::array({"a", "\xEF\xBF\xBD"}));
  EXPECT_EQ(comp["token_logprobs"][0], -0.5);
  EXPECT_EQ(comp["text_offset"], Json::array({10, 11}));
  ASSERT_EQ(comp["top_logprobs"].size(), 2u);
  EXPECT_EQ(comp["top_logprobs"][0].size(), 2u);  // the two alternatives (the chosen among them)
  EXPECT_EQ(comp["top_logprobs"][1].size(), 1u);  // the chosen token alone
}

// vLLM's prompt_logprobs: null for the first prompt token, then per token a map from token id
// to logprob, rank and decoded text holding the prompt's token and top_n alternatives (once each);
// on each completion choice, at the top of a chat response.
TEST(Render, PromptLogprobsAsVllmWritesThem) {
  const testing::FakeCodec codec({"a", "b", "c"}, {});
  const std::vector<int32_t> prompt = {0, 2, 1};
  const std::vector<TokenLogprobs> lps = {
      {.chosen = {2, -2.f, 3}, .top = {{0, -0.5f, 1}, {1, -1.f, 2}}},
      {.chosen = {1, -0.25f, 1}, .top = {{1, -0.25f, 1}, {2, -3.f, 2}}},
  };
  const Json p = prompt_logprobs_json(codec, prompt, lps, 1);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_TRUE(p[0].is_null());
  ASSERT_EQ(p[1].size(), 2u);  // the prompt's token "c" and the top one "a"
  EXPECT_EQ(p[1]["2"]["rank"], 3);
  EXPECT_EQ(p[1]["2"]["decoded_token"], "c");
  EXPECT_DOUBLE_EQ(p[1]["2"]["logprob"].get<double>(), -2.0);
  EXPECT_EQ(p[1]["0"]["rank"], 1);
  ASSERT_EQ(p[2].size(), 1u);  // the prompt's token is the top one
  EXPECT_EQ(p[2]["1"]["rank"], 1);
  EXPECT_EQ(prompt_logprobs_json(codec, prompt, lps, 0)[1].size(), 1u);
  // A prompt scored only in part (a request ended first): the rest null.
  EXPECT_TRUE(prompt_logprobs_json(codec, prompt, std::span(lps).first(1), 2)[2].is_null());

  std::vector<Choice> two{{"x", "stop", nullptr}, {"y", "stop", nullptr}};
  for (Choice& c : two) c.prompt_logprobs = p;
  const Json comp = response_json(kCompletion, two, 3, 2, {});
  EXPECT_EQ(comp["choices"][1]["prompt_logprobs"], p);
  EXPECT_FALSE(comp.contains("prompt_logprobs"));
  const Json chat = response_json(kChat, two, 3, 2, {});
  EXPECT_EQ(chat["prompt_logprobs"], p);
  EXPECT_FALSE(chat["choices"][0].contains("prompt_logprobs"));
  const std::vector<Choice> none{{"x", "stop", nullptr}};
  EXPECT_FALSE(response_json(kChat, none, 3, 1, {}).contains("prompt_logprobs"));
  EXPECT_FALSE(
      response_json(kCompletion, none, 3, 1, {})["choices"][0].contains("prompt_logprobs"));
}

TEST(Render, ModelsAndErrors) {
  const Json m = models_json("tiny", 3, 4096);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["owned_by"], "tandem");
  EXPECT_EQ(m["data"][0]["max_model_len"], 4096);
  const auto e = error_body(ApiError(503, "busy", "server_error", {}, "queue_full"));
  EXPECT_EQ(e["error"]["message"], "busy");
  EXPECT_EQ(e["error"]["type"], "server_error");
  EXPECT_TRUE(e["error"]["param"].is_null());
  EXPECT_EQ(e["error"]["code"], "queue_full");
}

}  // namespace
}  // namespace tandem::server
