// Reasoning text in chat answers (`tandem serve --reasoning-parser qwen3`): the part of the answer
// inside <think> ... </think> comes back as message.reasoning_content (vLLM's field), the rest as
// the content. The answer is reasoning from its start when the rendered prompt leaves a <think>
// block open (Qwen3.5's template ends the generation prompt with "<think>\n" unless
// enable_thinking is false) or when the answer itself opens with "<think>"; it is reasoning up to
// the first "</think>" (all of it when generation ends first), content after. The rule is decided
// at the start, so streams and whole responses split the text alike. Tool calls are read from the
// content only.
#pragma once

#include <string>
#include <string_view>

namespace tandem::server {

enum class ReasoningFormat { kNone, kQwen3 };

// "qwen3" or "deepseek_r1" (the same tags); throws Error naming the choices otherwise.
ReasoningFormat parse_reasoning_format(std::string_view name);

// Whether a rendered prompt leaves a <think> block open: it ends with "<think>" (and blank space).
// A "<think>" elsewhere (in a user's message) does not count.
bool prompt_opens_think(std::string_view prompt);

struct ReasoningPiece {
  std::string reasoning, content;
};

// Splits generated text as it comes; push returns what is safe to send (text that could begin a
// tag is held back), finish the rest.
class ReasoningStream {
 public:
  explicit ReasoningStream(bool in_think) : state_(in_think ? kThink : kStart) {}
  ReasoningPiece push(std::string_view text);
  ReasoningPiece finish();
  // Whether any reasoning was seen (the message then has reasoning_content, "" included).
  bool had_reasoning() const { return had_reasoning_; }

 private:
  enum State { kStart, kThink, kContent };
  State state_;
  std::string held_;
  bool had_reasoning_ = false;
};

}  // namespace tandem::server
