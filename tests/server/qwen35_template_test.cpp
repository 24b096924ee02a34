// The server's chat handling against the real Qwen3.5 chat template (tests/fixtures/tokenizer):
// an assistant turn's tool calls, sent as the openai client sends them (arguments a JSON string),
// render as the template's own tool-call text (it iterates arguments|items, which the protocol's
// conversion to an object makes possible), and the qwen3_coder parser reads that text back to the
// same call, its values typed by the tools' schema: the format the model learns is the format the
// parser reads. The generation prompt opens a think block unless enable_thinking is false.
#include <gtest/gtest.h>

#include "server/protocol.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"
#include "tests/tokenizer/test_util.h"
#include "tokenizer/chat_template.h"

namespace tandem::server {
namespace {

using tok::testing::fixture;
using tok::testing::read_text;

constexpr const char* kRequest = R"({
  "messages": [
    {"role": "user", "content": "Weather in Oslo for 3 days?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments":
        "{\"city\": \"Oslo\", \"days\": 3, \"metric\": true, \"where\": {\"lat\": 59.9}, \"tags\": [\"a\", \"b\"]}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "days": {"type": "integer"}, "metric": {"type": "boolean"}, "where": {"type": "object"},
      "tags": {"type": "array"}}}}}])";

// The request with more fields (", ..." or nothing).
std::string request(const std::string& extra) { return std::string(kRequest) + extra + "}"; }

TEST(Qwen35Template, ToolCallsRoundTripThroughTheTemplateAndThinkingOpensTheAnswer) {
  const ProtocolLimits limits{.served_model = "", .vocab_size = 1000};
  const GenerationRequest g =
      parse_generation_request(parse_body(request("")), Endpoint::kChat, limits);
  const tok::ChatTemplate t(read_text(fixture("qwen35/chat_template.jinja")),
                            &tok::testing::qwen3());
  const std::string prompt = t.render(g.messages, true, g.template_extra);
  // The assistant turn as the model would have generated it.
  const std::string open = "<|im_start|>assistant\n";
  const size_t at = prompt.find(open);
  ASSERT_NE(at, std::string::npos) << prompt;
  const size_t end = prompt.find("<|im_end|>", at);
  const std::string turn = prompt.substr(at + open.size(), end - at - open.size());
  EXPECT_NE(turn.find("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>"),
            std::string::npos)
      << turn;
  const ParsedToolCalls back = parse_tool_calls(turn, ToolCallFormat::kQwen3Coder, g.tools);
  ASSERT_EQ(back.calls.size(), 1u) << turn;
  EXPECT_EQ(back.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(back.calls[0].arguments),
            Json::parse(R"({"city": "Oslo", "days": 3, "metric": true, "where": {"lat": 59.9},
                            "tags": ["a", "b"]})"));
  // The generation prompt: an open think block, closed when thinking is off.
  EXPECT_TRUE(prompt_opens_think(prompt));
  const GenerationRequest off = parse_generation_request(
      parse_body(request(R"(, "chat_template_kwargs": {"enable_thinking": false})")),
      Endpoint::kChat, limits);
  EXPECT_FALSE(prompt_opens_think(t.render(off.messages, true, off.template_extra)));
}

}  // namespace
}  // namespace tandem::server
