// tool_choice "required" and named functions (server/tool_choice.h): the schema each builds
// (what it lets through, byte by byte, with tools whose parameters use $defs), the requests it
// refuses and how, and calls read back from forced answers.
#include "server/tool_choice.h"

#include <gtest/gtest.h>

#include "server/api_error.h"
#include "spec/json_constraint.h"

namespace tandem::server {
namespace {

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/unit"}},
    "required": ["city"], "$defs": {"unit": {"enum": ["c", "f"]}}}}},
  {"type": "function", "function": {"name": "now"}}
])");

bool accepts(const ForcedTools& f, const std::string& text) {
  JsonAutomaton a(f.schema.get(), 0);
  for (char c : text) {
    if (!a.feed(static_cast<unsigned char>(c))) return false;
  }
  return a.can_end();
}

std::string refusal(const Json& choice, const Json& tools) {
  try {
    parse_tool_choice(choice, tools);
  } catch (const ApiError& e) {
    return e.param + ": " + e.what();
  }
  return "";
}

TEST(ToolChoice, NamedFunctionAnswersAreItsArguments) {
  const ForcedTools f = parse_tool_choice(
      Json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"), kTools);
  EXPECT_EQ(f.mode, ToolForce::kNamed);
  EXPECT_EQ(f.name, "get_weather");
  EXPECT_TRUE(accepts(f, R"({"city": "Oslo", "unit": "c"})"));
  EXPECT_FALSE(accepts(f, R"({"unit": "c"})"));                  // city is required
  EXPECT_FALSE(accepts(f, R"({"city": "Oslo", "unit": "k"})"));  // $defs/unit
  const ForcedTools now = parse_tool_choice(
      Json::parse(R"({"type": "function", "function": {"name": "now"}})"), kTools);
  EXPECT_TRUE(accepts(now, "{}"));  // no parameters: an empty object
  EXPECT_FALSE(accepts(now, R"({"x": 1})"));
  const ParsedToolCalls calls = forced_tool_calls(R"({"city": "Oslo"})", f.mode, f.name);
  ASSERT_EQ(calls.calls.size(), 1u);
  EXPECT_EQ(calls.calls[0].name, "get_weather");
  EXPECT_EQ(calls.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_FALSE(calls.content.has_value());
  const ParsedToolCalls cut = forced_tool_calls(R"({"city": "Os)", f.mode, f.name);
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.content, R"({"city": "Os)");  // cut by max_tokens: the text as content
}

TEST(ToolChoice, RequiredAnswersAreOneOrMoreCallsOfTheTools) {
  const ForcedTools f = parse_tool_choice("required", kTools);
  EXPECT_EQ(f.mode, ToolForce::kRequired);
  EXPECT_TRUE(accepts(f, R"([{"name": "now", "parameters": {}}])"));
  EXPECT_TRUE(accepts(f, R"([{"name": "get_weather", "parameters": {"city": "Rome", "unit": "f"}},
                            {"parameters": {}, "name": "now"}])"));
  EXPECT_FALSE(accepts(f, "[]"));  // at least one
  const ForcedTools one = parse_tool_choice("required", kTools, /*parallel=*/false);
  EXPECT_TRUE(accepts(one, R"([{"name": "now", "parameters": {}}])"));
  EXPECT_FALSE(
      accepts(one, R"([{"name": "now", "parameters": {}}, {"name": "now", "parameters": {}}])"));
  EXPECT_FALSE(accepts(f, R"([{"name": "later", "parameters": {}}])"));      // not a tool
  EXPECT_FALSE(accepts(f, R"([{"name": "now", "parameters": {"x": 1}}])"));  // its parameters
  EXPECT_FALSE(
      accepts(f, R"([{"name": "get_weather", "parameters": {"city": "R", "unit": "k"}}])"));
  const ParsedToolCalls calls = forced_tool_calls(
      R"([{"name": "get_weather", "parameters": {"city": "Rome"}}, {"name": "now", "parameters": {}}])",
      f.mode, f.name);
  ASSERT_EQ(calls.calls.size(), 2u);
  EXPECT_EQ(calls.calls[0].name, "get_weather");
  EXPECT_EQ(calls.calls[0].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(calls.calls[1].name, "now");
  EXPECT_EQ(calls.calls[1].arguments, "{}");
  EXPECT_NE(calls.calls[0].id, calls.calls[1].id);
}

TEST(ToolChoice, NoneAndAutoForceNothingAndMistakesNameTheField) {
  EXPECT_EQ(parse_tool_choice("auto", kTools).mode, ToolForce::kNone);
  EXPECT_EQ(parse_tool_choice("none", Json()).mode, ToolForce::kNone);
  EXPECT_EQ(refusal("always", kTools),
            "tool_choice: 'tool_choice' must be \"none\", \"auto\", \"required\" or a named "
            "function, got \"always\"");
  EXPECT_EQ(refusal("required", Json()),
            "tool_choice: 'tool_choice' \"required\" or a named function needs a non-empty "
            "'tools'");
  EXPECT_EQ(refusal(Json::parse(R"({"type": "function", "function": {"name": "later"}})"), kTools),
            "tool_choice: 'tool_choice' names function 'later', which is not in 'tools'");
  EXPECT_EQ(refusal(Json::parse(R"({"type": "function"})"), kTools),
            "tool_choice: 'tool_choice' as an object must be {\"type\": \"function\", "
            "\"function\": {\"name\": ...}}");
  const Json bad_tools = Json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}}}])");
  EXPECT_EQ(
      refusal("required", bad_tools),
      "tools: 'tools[0]' (f): its parameters at '#/properties/n': 'multipleOf' is not supported "
      "(structured output cannot enforce it)");
  EXPECT_EQ(refusal("required", Json::parse(R"([{"type": "function"}])")),
            "tools: 'tools[0]' must be {\"type\": \"function\", \"function\": {\"name\": ..., "
            "\"parameters\": ...}}");
}

}  // namespace
}  // namespace tandem::server
