// tool_choice "required" and a named function ({"type": "function", "function": {"name": ...}}),
// enforced as vLLM does: by structured output (spec/json_schema.h) in place of the model's own
// call format, so it works with any model and without --tool-call-parser. A named function's
// answer is its arguments object (its `parameters` schema); a required answer is a JSON array of
// at least one {"name": NAME, "parameters": {...}} over the request's tools (exactly one with
// parallel_tool_calls false). The text is read back as the message's tool_calls (content null);
// finish_reason is "tool_calls" for required and "stop" for a named function (as OpenAI answers a
// forced function). A text that does not parse (cut by max_tokens) is returned as content.
#pragma once

#include <memory>
#include <string_view>

#include "server/protocol.h"
#include "server/tool_calls.h"

namespace tandem::server {

struct ForcedTools {
  ToolForce mode = ToolForce::kNone;
  std::string name;                          // kNamed: the function
  std::shared_ptr<const JsonSchema> schema;  // what the answer must be
};

// From a chat request's tool_choice and tools (null when absent): "none" / "auto" force nothing;
// anything else wrong is an ApiError 400 naming tool_choice or tools (a tool's parameters the
// schema compiler refuses name the tool and the keyword).
// parallel: the request's parallel_tool_calls (false: a required answer is exactly one call).
ForcedTools parse_tool_choice(const Json& choice, const Json& tools, bool parallel = true);

// The calls a forced answer holds; no calls (the text as content) when it does not parse.
ParsedToolCalls forced_tool_calls(std::string_view text, ToolForce mode, const std::string& name);

}  // namespace tandem::server
