// Reasoning text in chat answers (reasoning.h).
#include "server/reasoning.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "server/text_stream.h"

namespace tandem::server {

namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

}  // namespace

ReasoningFormat parse_reasoning_format(std::string_view name) {
  if (name == "qwen3" || name == "deepseek_r1") return ReasoningFormat::kQwen3;
  fail(
      "unknown reasoning parser '{}' (choose qwen3 for Qwen3 / Qwen3.5 / Qwen3-Next, or "
      "deepseek_r1: both read <think> ... </think>)",
      name);
}

bool prompt_opens_think(std::string_view prompt) {
  while (!prompt.empty() && std::isspace(static_cast<unsigned char>(prompt.back()))) {
    prompt.remove_suffix(1);
  }
  return prompt.ends_with(kOpen);
}

ReasoningPiece ReasoningStream::push(std::string_view text) {
  held_.append(text);
  ReasoningPiece out;
  for (;;) {
    if (state_ == kStart) {  // does the answer open with <think> (after blank space)?
      const auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
      const size_t i =
          static_cast<size_t>(std::find_if_not(held_.begin(), held_.end(), blank) - held_.begin());
      const std::string_view rest = std::string_view(held_).substr(i);
      if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return out;  // wait
      if (rest.substr(0, kOpen.size()) == kOpen) {
        held_.erase(0, i + kOpen.size());
        state_ = kThink;
      } else {
        state_ = kContent;
      }
      continue;
    }
    if (state_ == kThink) {
      had_reasoning_ = true;
      if (const size_t j = held_.find(kClose); j != std::string::npos) {
        out.reasoning += held_.substr(0, j);
        held_.erase(0, j + kClose.size());
        state_ = kContent;
        continue;
      }
      const size_t keep = partial_tag(held_, kClose);
      out.reasoning += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    out.content += held_;
    held_.clear();
    return out;
  }
}

ReasoningPiece ReasoningStream::finish() {
  ReasoningPiece out;
  if (state_ == kThink) {
    had_reasoning_ = true;
    out.reasoning = std::move(held_);
  } else {
    out.content = std::move(held_);
  }
  held_.clear();
  return out;
}

}  // namespace tandem::server
