// One generation request in flight (generation.h).
#include "server/generation.h"

#include <algorithm>

namespace tandem::server {

Generation::Generation(const HandlerContext& ctx, const GenerationRequest& g,
                       std::vector<int32_t> stop_ids, std::shared_ptr<Channel> ch, bool opens_think)
    : ctx_(ctx),
      endpoint_(g.endpoint),
      want_logprobs_(g.logprobs >= 0),
      include_stop_(g.include_stop_str),
      top_logprobs_(g.logprobs),
      prompt_top_(g.prompt_logprobs),
      no_output_(g.echo && g.max_tokens == 0),  // (completions: chat's max_tokens is >= 1)
      stop_ids_(std::move(stop_ids)),
      stream_(ctx.codec, g.stop, g.sampling.min_tokens, g.include_stop_str, g.skip_special),
      ch_(std::move(ch)) {
  if (g.tool_force != ToolForce::kNone) {
    force_ = g.tool_force;
    forced_tool_ = g.forced_tool;
  } else if (g.endpoint == Endpoint::kChat && ctx.opt.tool_call_format != ToolCallFormat::kNone &&
             g.tools.is_array() && !g.tool_choice_none) {
    tools_.emplace(ctx.opt.tool_call_format, g.tools);
  }
  if (g.endpoint == Endpoint::kChat && ctx.opt.reasoning_format != ReasoningFormat::kNone) {
    reasoning_.emplace(opens_think);
  }
}

ReasoningPiece Generation::absorb(const Delivery& d) {
  std::string text;
  if ((want_logprobs_ || prompt_top_ >= 0) && !d.prompt_logprobs.empty()) {
    prompt_lps_ = d.prompt_logprobs;
  }
  size_t n = no_output_ ? 0 : d.tokens.size();
  // A stop token ends generation but is not part of the text (it still counts as generated),
  // unless include_stop_str_in_output (then its text, empty for a special token skipped).
  if (d.finished && d.finish_reason == "stop" && n > 0 && !include_stop_ &&
      std::find(stop_ids_.begin(), stop_ids_.end(), d.tokens[n - 1]) != stop_ids_.end()) {
    --n;
    if (!stream_.stopped()) stop_token_ = true;
  }
  for (size_t i = 0; i < n && !stream_.stopped(); ++i) {
    text += stream_.push(d.tokens[i]);
    if (want_logprobs_ && i < d.logprobs.size()) lps_.push_back(d.logprobs[i]);
    if (stream_.stopped()) {
      stop_token_ = false;
      ctx_.loop.cancel(ch_);  // the rest of the engine's work is not wanted
    }
  }
  if (d.finished) {
    finished_ = true;
    stats_ = d.stats;
    if (no_output_) {
      finish_ = d.finish_reason == "cancelled" ? "abort" : "length";
    } else if (stream_.stopped()) {
      finish_ = "stop";
    } else if (d.finish_reason == "cancelled") {
      finish_ = "abort";
    } else {
      finish_ = d.finish_reason;
    }
    text += stream_.finish();
  }
  ReasoningPiece out;
  if (reasoning_) {
    out = reasoning_->push(text);
    if (d.finished) {
      ReasoningPiece end = reasoning_->finish();
      out.reasoning += end.reasoning;
      out.content += end.content;
    }
  } else {
    out.content = std::move(text);
  }
  if (force_ != ToolForce::kNone) {  // all held: the answer is the calls' JSON
    forced_text_ += out.content;
    out.content.clear();
    if (d.finished) {
      ParsedToolCalls end = forced_tool_calls(forced_text_, force_, forced_tool_);
      out.content = end.content.value_or("");
      calls_ = std::move(end.calls);
      ended_by_ = finish_;
      if (!calls_.empty() && finish_ != "abort") {
        finish_ = force_ == ToolForce::kRequired ? "tool_calls" : "stop";
      }
    }
    return out;
  }
  if (!tools_) return out;
  out.content = tools_->push(out.content);
  if (d.finished) {  // the calls, or the held-back text as content
    ParsedToolCalls end = tools_->finish();
    out.content += end.content.value_or("");
    calls_ = std::move(end.calls);
    ended_by_ = finish_;
    if (!calls_.empty() && finish_ != "abort") finish_ = "tool_calls";
  }
  return out;
}

Json Generation::take_logprobs(int64_t text_offset) {
  if (!want_logprobs_) return nullptr;
  Json j = logprobs_json(endpoint_, ctx_.codec, lps_, text_offset);
  lps_.clear();
  return j;
}
Json Generation::take_echo_logprobs(std::span<const int32_t> prompt) {
  if (!want_logprobs_) return nullptr;
  std::vector<TokenLogprobs> echoed = prompt_lps_;  // scored for prompt_logprobs' top count too
  for (TokenLogprobs& t : echoed) {
    if (t.top.size() > static_cast<size_t>(top_logprobs_)) t.top.resize(top_logprobs_);
  }
  Json j = echo_logprobs_json(ctx_.codec, prompt, echoed, lps_);
  lps_.clear();
  return j;
}
Json Generation::prompt_logprobs(std::span<const int32_t> prompt) const {
  if (prompt_top_ < 0) return nullptr;
  return prompt_logprobs_json(ctx_.codec, prompt, prompt_lps_, prompt_top_);
}

}  // namespace tandem::server
