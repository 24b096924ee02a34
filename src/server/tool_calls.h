// Tool calls in generated chat text (`tandem serve --tool-call-parser`), vLLM's parsers of the
// two formats Qwen models are trained on:
//   qwen3_coder (Qwen3.5, Qwen3-Next, Qwen3-Coder):
//     <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
//     each VALUE typed by the tool's JSON schema (string; integer / number; boolean; null; other
//     types read as JSON, else kept as a string);
//   hermes (Qwen2.5, Qwen3): <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>.
// The message's content is the text before the first <tool_call> (null when empty); from there on
// the text is calls (a last block cut off by the end of generation counts when it parses), and a
// text whose calls do not parse is all content, as vLLM returns it. Streams send the content as it
// comes, hold back from the first <tool_call> (and any text that could begin one), and send the
// calls whole at the end. Greedy output under MTP is plain decoding's, so its tool calls are too.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/protocol.h"

namespace tandem::server {

enum class ToolCallFormat { kNone, kQwen3Coder, kHermes };

// "qwen3_coder" or "hermes" (vLLM's names); throws Error naming the choices otherwise.
ToolCallFormat parse_tool_call_format(std::string_view name);

struct ToolCall {
  std::string id;         // call_<24 hex digits>
  std::string name;       // the function
  std::string arguments;  // a JSON object, serialised (OpenAI's function.arguments)
};

struct ParsedToolCalls {
  std::optional<std::string> content;  // null when empty
  std::vector<ToolCall> calls;         // empty: no calls (content is then the whole text)
};

// A new call id: call_<24 hex digits>.
std::string call_id();

// Splits a whole generated text. `tools`: the request's tools array (for parameter types).
ParsedToolCalls parse_tool_calls(std::string_view text, ToolCallFormat format, const Json& tools);

// The OpenAI tool_calls array of calls (with `index` for stream deltas).
Json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index);

// Streaming: content as it becomes safe, the calls at the end.
class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat format, Json tools) : format_(format), tools_(std::move(tools)) {}
  // Adds generated text; returns content that can be sent now.
  std::string push(std::string_view text);
  // The end of the text: content still to send (held back text, or all of it when no call
  // parses) and the calls.
  ParsedToolCalls finish();

 private:
  ToolCallFormat format_;
  Json tools_;
  std::string sent_;  // content sent so far (the text before any <tool_call>)
  std::string held_;  // from a possible or actual <tool_call> on
  bool in_call_ = false;
};

}  // namespace tandem::server
