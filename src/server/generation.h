// One generation request in flight (a choice of /v1/completions, /v1/chat/completions or
// /v1/responses): turns the engine's deliveries into text (UTF-8 and stop-string holdback),
// reasoning, tool calls, logprobs and the final state.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/engine_loop.h"
#include "server/handler_context.h"
#include "server/openai_render.h"
#include "server/reasoning.h"
#include "server/text_stream.h"
#include "server/tool_calls.h"
#include "server/tool_choice.h"

namespace tandem::server {

class Generation {
 public:
  Generation(const HandlerContext& ctx, const GenerationRequest& g, std::vector<int32_t> stop_ids,
             std::shared_ptr<Channel> ch, bool opens_think);

  // The reasoning and content text d makes safe to send; its tokens' logprobs are kept for
  // take_logprobs.
  ReasoningPiece absorb(const Delivery& d);
  // Whether the answer had reasoning (--reasoning-parser): the message then has
  // reasoning_content.
  bool had_reasoning() const { return reasoning_ && reasoning_->had_reasoning(); }

  // The tool calls read out of the whole text (empty: none), once finished.
  const std::vector<ToolCall>& tool_calls() const { return calls_; }
  // With tool calls: how generation ended ("stop" or "length"); finish_reason() says tool_calls.
  const std::string& ended_by() const { return ended_by_; }

  bool finished() const { return finished_; }
  const std::string& finish_reason() const { return finish_; }
  const GenerationStats& stats() const { return stats_; }
  int64_t completion_tokens() const { return stream_.tokens() + (stop_token_ ? 1 : 0); }
  // The logprobs gathered since the last call, in the endpoint's format (null when not asked).
  Json take_logprobs(int64_t text_offset);
  // echo: the prompt's logprobs (tokens 1 .. n - 1), and the whole response's (null when not
  // asked) after the prompt's tokens.
  Json take_echo_logprobs(std::span<const int32_t> prompt);
  // vLLM's prompt_logprobs (null when not asked for).
  Json prompt_logprobs(std::span<const int32_t> prompt) const;

 private:
  const HandlerContext& ctx_;
  Endpoint endpoint_;
  bool want_logprobs_;
  bool include_stop_;  // include_stop_str_in_output
  int top_logprobs_;   // logprobs' alternatives per token
  int prompt_top_;     // prompt_logprobs' (-1: off)
  bool no_output_;     // echo with max_tokens 0: the engine's token is not part of the response
  std::vector<int32_t> stop_ids_;
  TextStream stream_;
  std::shared_ptr<Channel> ch_;
  std::vector<TokenLogprobs> lps_, prompt_lps_;
  std::optional<ToolCallStream> tools_;  // --tool-call-parser, a request with tools
  ToolForce force_ = ToolForce::kNone;   // tool_choice required / named (tool_choice.h)
  std::string forced_tool_, forced_text_;
  std::optional<ReasoningStream> reasoning_;  // --reasoning-parser, chat
  std::vector<ToolCall> calls_;
  bool finished_ = false, stop_token_ = false;
  std::string finish_, ended_by_;
  GenerationStats stats_;
};

}  // namespace tandem::server
