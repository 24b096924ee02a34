// Tool calls read out of generated chat text (server/tool_calls.h): both formats, parameter
// types from the tools' schemas, calls cut off by the end of generation, malformed calls left as
// content, and streams that never send any part of a call as content, however the text is split.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/error.h"

namespace tandem::server {
namespace {

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "temp": {"type": "number"}, "metric": {"type": "boolean"},
                   "where": {"type": "object"}, "tags": {"type": ["array", "null"]},
                   "unit": {"type": "string", "enum": ["c", "f"]}}}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object",
    "properties": {}}}}
])");

Json args_of(const ToolCall& c) { return Json::parse(c.arguments); }

TEST(ToolCalls, Qwen3CoderTypesParametersByTheToolSchema) {
  const std::string text =
      "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n"
      "</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=temp>\n21.5\n</parameter>\n"
      "<parameter=metric>\nTrue\n</parameter>\n<parameter=where>\n{\"lat\": 40.7}\n</parameter>\n"
      "<parameter=tags>\n[\"a\", 2]\n</parameter>\n<parameter=unit>\nc\n</parameter>\n"
      "<parameter=note>\nline one\nline two\n</parameter>\n</function>\n</tool_call>";
  const ParsedToolCalls r = parse_tool_calls(text, ToolCallFormat::kQwen3Coder, kTools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "Let me check.\n");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(args_of(r.calls[0]), Json::parse(R"({"city": "New York", "days": 3, "temp": 21.5,
      "metric": true, "where": {"lat": 40.7}, "tags": ["a", 2], "unit": "c",
      "note": "line one\nline two"})"));
  // Values that do not read as their type stay strings; "null" is null; 3.0 is 3.
  const ParsedToolCalls odd = parse_tool_calls(
      "<tool_call><function=get_weather><parameter=days>three</parameter><parameter=temp>3.0"
      "</parameter><parameter=metric>maybe</parameter><parameter=city>null</parameter>"
      "<parameter=tags> [1] </parameter>"
      "<parameter=where>{not json</parameter></function></tool_call>",
      ToolCallFormat::kQwen3Coder, kTools);
  ASSERT_EQ(odd.calls.size(), 1u);
  EXPECT_FALSE(odd.content.has_value());
  EXPECT_EQ(args_of(odd.calls[0]), Json::parse(R"({"days": "three", "temp": 3, "metric": "maybe",
      "city": null, "tags": [1], "where": "{not json"})"));
  // Blank space around numbers and booleans does not matter (Python's int() and float()).
  const ParsedToolCalls spaced = parse_tool_calls(
      "<tool_call><function=get_weather><parameter=days> 4 </parameter><parameter=temp>\t2.5 "
      "</parameter><parameter=metric> false</parameter></function></tool_call>",
      ToolCallFormat::kQwen3Coder, kTools);
  ASSERT_EQ(spaced.calls.size(), 1u);
  EXPECT_EQ(args_of(spaced.calls[0]), Json::parse(R"({"days": 4, "temp": 2.5, "metric": false})"));
}

TEST(ToolCalls, Qwen3CoderSeveralCallsAndCutOffOnes) {
  // Two blocks (text between them dropped), the second holding two functions.
  const ParsedToolCalls two = parse_tool_calls(
      "<tool_call>\n<function=now>\n</function>\n</tool_call>\nand\n<tool_call>\n"
      "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
      "<function=now>\n</function>\n</tool_call>\ntrailing",
      ToolCallFormat::kQwen3Coder, kTools);
  ASSERT_EQ(two.calls.size(), 3u);
  EXPECT_EQ(two.calls[0].name, "now");
  EXPECT_EQ(two.calls[0].arguments, "{}");
  EXPECT_EQ(two.calls[1].name, "get_weather");
  EXPECT_EQ(args_of(two.calls[1]), Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(two.calls[2].name, "now");
  std::set<std::string> ids;
  for (const ToolCall& c : two.calls) ids.insert(c.id);
  EXPECT_EQ(ids.size(), 3u);
  // Generation ended inside the call: no </parameter>, </function> or </tool_call>.
  const ParsedToolCalls cut = parse_tool_calls(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n2",
      ToolCallFormat::kQwen3Coder, kTools);
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(args_of(cut.calls[0]), Json::parse(R"({"city": "Oslo", "days": 2})"));
}

TEST(ToolCalls, MalformedCallsAndNoCallsAreContent) {
  for (const std::string& text :
       {std::string("no calls here"), std::string("<tool_call>\nno function\n</tool_call>"),
        std::string("a <tool_call><function=>\n</function></tool_call>"),
        std::string("<tool_call><function=now")}) {
    // (the last: a function name without its '>' is malformed)
    const ParsedToolCalls r = parse_tool_calls(text, ToolCallFormat::kQwen3Coder, kTools);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text) << text;
  }
  EXPECT_FALSE(parse_tool_calls("", ToolCallFormat::kQwen3Coder, kTools).content.has_value());
  // Without a parser nothing is read as a call.
  const std::string call = "<tool_call><function=now></function></tool_call>";
  EXPECT_EQ(parse_tool_calls(call, ToolCallFormat::kNone, kTools).content, call);
}

TEST(ToolCalls, HermesJsonCalls) {
  const ParsedToolCalls r = parse_tool_calls(
      "ok <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", "
      "\"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\"}\n</tool_call>",
      ToolCallFormat::kHermes, kTools);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "ok ");
  EXPECT_EQ(args_of(r.calls[0]), Json::parse(R"({"city": "Rome", "days": 2})"));
  EXPECT_EQ(r.calls[1].arguments, "{}");
  // Arguments already a string stay that string; bad JSON is content.
  const ParsedToolCalls s =
      parse_tool_calls(R"(<tool_call>{"name": "now", "arguments": "{\"x\": 1}"}</tool_call>)",
                       ToolCallFormat::kHermes, kTools);
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments, R"({"x": 1})");
  const std::string bad = R"(<tool_call>{"name": now}</tool_call>)";
  EXPECT_EQ(parse_tool_calls(bad, ToolCallFormat::kHermes, kTools).content, bad);
  EXPECT_TRUE(parse_tool_calls(bad, ToolCallFormat::kHermes, kTools).calls.empty());
}

TEST(ToolCalls, FormatNames) {
  EXPECT_EQ(parse_tool_call_format("qwen3_coder"), ToolCallFormat::kQwen3Coder);
  EXPECT_EQ(parse_tool_call_format("hermes"), ToolCallFormat::kHermes);
  EXPECT_THROW(parse_tool_call_format("qwen"), Error);
}

TEST(ToolCalls, JsonOfCalls) {
  const std::vector<ToolCall> calls = {{"call_1", "now", "{}"}, {"call_2", "f", R"({"a":1})"}};
  EXPECT_EQ(tool_calls_json(calls, false), Json::parse(R"([
    {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}},
    {"id": "call_2", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}])"));
  EXPECT_EQ(tool_calls_json(calls, true)[1]["index"], 1);
}

// Streams: the content sent equals the text before the first <tool_call>, no piece of a call is
// ever sent, and the calls at the end are the whole text's; a text without a parsable call comes
// out whole. Every split of each text into pieces of 1..6 bytes.
TEST(ToolCalls, StreamsSendTheContentAndHoldTheCalls) {
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nLima\n</parameter>\n</function>\n"
      "</tool_call>";
  const std::vector<std::string> texts = {"Checking <tool weather> first.\n" + call, call,
                                          "plain answer with < and <tool_ and <tool_cal",
                                          "bad <tool_call>\nnothing\n</tool_call>", ""};
  std::mt19937 rng(5);
  for (const std::string& text : texts) {
    const ParsedToolCalls whole = parse_tool_calls(text, ToolCallFormat::kQwen3Coder, kTools);
    for (int trial = 0; trial < 200; ++trial) {
      ToolCallStream s(ToolCallFormat::kQwen3Coder, kTools);
      std::string sent;
      for (size_t pos = 0; pos < text.size();) {
        const size_t len = std::min<size_t>(1 + rng() % 6, text.size() - pos);
        sent += s.push(std::string_view(text).substr(pos, len));
        pos += len;
        EXPECT_EQ(sent.find("<tool_call"), std::string::npos) << text;
      }
      const ParsedToolCalls end = s.finish();
      sent += end.content.value_or("");
      ASSERT_EQ(end.calls.size(), whole.calls.size()) << text;
      for (size_t i = 0; i < end.calls.size(); ++i) {
        EXPECT_EQ(end.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(end.calls[i].arguments, whole.calls[i].arguments);
      }
      EXPECT_EQ(sent, whole.calls.empty() ? text : whole.content.value_or("")) << text;
    }
  }
}

}  // namespace
}  // namespace tandem::server
