// The generation endpoints: a validated request becomes an engine Request (prompt tokenized or
// rendered through the chat template, length checked against --max-model-len), goes to the engine
// loop, and its tokens come back through a TextStream (UTF-8 and stop-string holdback) into one
// JSON response or an SSE stream. A stop string cancels the engine request; a client that goes
// away mid-stream cancels it too (seen by the next delivery, i.e. within one step). `n` choices are
// n engine requests (choice i with seed + i), each with its own TextStream.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/handler_context.h"
#include "server/openai_render.h"
#include "server/reasoning.h"
#include "server/text_stream.h"
#include "server/tool_calls.h"
#include "server/tool_choice.h"

namespace tandem::server {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The engine request of a validated body (completions: of its prompt `prompt`).
// opens_think: whether the rendered chat prompt leaves a <think> block open (reasoning.h).
Request engine_request(const HandlerContext& ctx, const GenerationRequest& g, size_t prompt,
                       bool& opens_think) {
  Request r;
  const bool chat = g.endpoint == Endpoint::kChat;
  const std::string prompt_param = chat                    ? "messages"
                                   : g.prompts.size() == 1 ? "prompt"
                                                           : fmt::format("prompt[{}]", prompt);
  opens_think = false;
  try {
    if (chat) {
      const std::string rendered =
          render_chat_prompt(ctx.codec, g.messages, g.add_generation_prompt,
                             g.continue_final_message, g.template_extra);
      opens_think = prompt_opens_think(rendered);
      r.prompt = ctx.codec.encode(rendered);
    } else if (g.prompts[prompt].text) {
      r.prompt = ctx.codec.encode(*g.prompts[prompt].text);
    } else {
      r.prompt = g.prompts[prompt].ids;
    }
  } catch (const Error& e) {
    throw bad_request(prompt_param, e.what());
  }
  if (g.truncate_prompt_tokens &&
      static_cast<int64_t>(r.prompt.size()) > *g.truncate_prompt_tokens) {
    r.prompt.erase(r.prompt.begin(), r.prompt.end() - *g.truncate_prompt_tokens);  // the last ones
  }
  const auto n = static_cast<int64_t>(r.prompt.size());
  const int64_t max_len = ctx.opt.max_model_len;
  if (n == 0) throw bad_request(prompt_param, "the prompt has no tokens");
  if (g.max_tokens) {
    if (n + *g.max_tokens > max_len) {
      throw ApiError(
          400,
          fmt::format("This model's maximum context length is {} tokens. However, you "
                      "requested {} tokens ({} in the {}, {} in the completion). "
                      "Please reduce the length of the {} or of the completion.",
                      max_len, n + *g.max_tokens, n, prompt_param, *g.max_tokens, prompt_param),
          "invalid_request_error", "max_tokens", "context_length_exceeded");
    }
    // echo with max_tokens 0: the engine still takes a token (the prompt's last row's), which
    // the response leaves out (Generation).
    r.max_tokens = static_cast<int>(std::max<int64_t>(*g.max_tokens, 1));
  } else {
    if (n + 1 > max_len) {
      throw ApiError(400,
                     fmt::format("This model's maximum context length is {} tokens. However, the "
                                 "{} has {} tokens, which leaves no room for a completion.",
                                 max_len, prompt_param, n),
                     "invalid_request_error", prompt_param, "context_length_exceeded");
    }
    r.max_tokens = static_cast<int>(max_len - n);
    if (const std::optional<int64_t> cap = ctx.limits.defaults.max_tokens) {  // max_new_tokens
      r.max_tokens = static_cast<int>(std::min<int64_t>(r.max_tokens, *cap));
    }
  }
  r.sampling = g.sampling;
  if (!g.ignore_eos) r.stop_ids = ctx.opt.eos_ids;
  for (int32_t id : g.stop_token_ids) {
    if (std::find(r.stop_ids.begin(), r.stop_ids.end(), id) == r.stop_ids.end()) {
      r.stop_ids.push_back(id);
    }
  }
  r.logprobs = g.logprobs;
  r.max_draft_tokens = g.num_speculative_tokens;
  // The prompt scored for echo's logprobs and for prompt_logprobs: the larger top count of the
  // two (each response field shows its own).
  r.prompt_logprobs = std::max(g.echo && !chat ? g.logprobs : -1, g.prompt_logprobs);
  r.json_object = g.json_object;
  r.json_schema = g.json_schema;
  // With the reasoning split off, the think block is free text and the object follows it.
  r.json_after_think =
      g.json_object && opens_think && ctx.opt.reasoning_format != ReasoningFormat::kNone;
  return r;
}

// One choice: its engine request and what the handler has of it.
struct ChoiceRun {
  size_t prompt = 0;  // completions: which of the request's prompts
  std::shared_ptr<Channel> ch;
  std::unique_ptr<Generation> gen;
  Delivery pending;  // the first delivery, until it is absorbed
  bool have_pending = true;
  bool first_chunk = true;  // stream: the next chunk is the choice's first
  int64_t offset = 0;       // stream: completion text bytes sent (logprobs' text_offset)
};

// A choice's end in the metrics (its engine request finished).
void count_end(const HandlerContext& ctx, const Generation& gen) {
  // Counted by how generation ended (a choice with tool calls ended by a stop or its length).
  const std::string& why =
      gen.finish_reason() == "tool_calls" ? gen.ended_by() : gen.finish_reason();
  if (why == "stop" || why == "length" || why == "abort") ctx.metrics.request_finished(why);
}

// A choice's tool_calls for the response (null: none).
Json tool_calls_of(const Generation& gen, bool with_index) {
  return gen.tool_calls().empty() ? Json() : tool_calls_json(gen.tool_calls(), with_index);
}

int64_t completion_tokens(const std::vector<ChoiceRun>& runs) {
  int64_t n = 0;
  for (const ChoiceRun& c : runs) n += c.gen->completion_tokens();
  return n;
}

// The HTTP request's access record once every choice has ended: the prompt once, the choices'
// completion tokens summed, their finish reasons (comma-separated when n > 1).
void record_end(const std::vector<ChoiceRun>& runs, int64_t prompt_tokens) {
  AccessRecord& rec = access_record();
  rec.prompt_tokens = prompt_tokens;
  rec.completion_tokens = completion_tokens(runs);
  rec.finish_reason.clear();
  for (const ChoiceRun& c : runs) {
    rec.finish_reason += (rec.finish_reason.empty() ? "" : ",") + c.gen->finish_reason();
  }
}

// The `speculation` field of the choices: their drafts and acceptances summed.
GenerationStats summed_stats(const std::vector<ChoiceRun>& runs) {
  GenerationStats t;
  std::map<size_t, int64_t> cached;  // per prompt: its choices' most (the prompt counts once)
  for (const ChoiceRun& c : runs) {
    t.draft_tokens += c.gen->stats().draft_tokens;
    t.accepted_tokens += c.gen->stats().accepted_tokens;
    t.drafting_steps += c.gen->stats().drafting_steps;
    cached[c.prompt] = std::max(cached[c.prompt], c.gen->stats().cached_tokens);
  }
  for (const auto& [prompt, n] : cached) t.cached_tokens += n;
  return t;
}

// Waits for the engine to take or refuse the request; the first delivery may carry tokens too.
Delivery await_acceptance(const std::shared_ptr<Channel>& ch) {
  Delivery d;
  while (!ch->wait(kPoll, d) || (!d.accepted && !d.finished)) {
  }
  if (d.error) throw bad_request({}, *d.error);
  return d;
}

// With echo, the prompt: its text leads each choice's text, its tokens' logprobs lead each
// choice's logprobs, and the completion's text offsets start after its tokens' bytes.
struct EchoPrompt {
  std::string text;
  std::vector<int32_t> ids;
  int64_t bytes = 0;  // its tokens' bytes, special tokens included
};

// The prompt's text as given, unless truncate_prompt_tokens may have cut it (then the ids decoded).
std::optional<EchoPrompt> echo_prompt_of(const HandlerContext& ctx, const GenerationRequest& g,
                                         size_t index, const std::vector<int32_t>& prompt) {
  if (!g.echo) return std::nullopt;
  const std::optional<std::string>& text = g.prompts[index].text;
  EchoPrompt e{text && !g.truncate_prompt_tokens ? *text : ctx.codec.decode(prompt, false), prompt,
               0};
  for (int32_t id : prompt)
    e.bytes += static_cast<int64_t>(ctx.codec.token_bytes(id, false).size());
  return e;
}

// A choice's logprobs for its first response or chunk, text its text so far: with echo the
// prompt leads (its text prepended to text), and offset (the completion's text bytes sent, which
// the caller then advances by text's size) is set so that it lands past the prompt's tokens'
// bytes, where the generated tokens' offsets start.
Json lead_with_prompt(const std::optional<EchoPrompt>& echo, Generation& gen, std::string& text,
                      int64_t& offset) {
  if (!echo) return gen.take_logprobs(offset);
  text = echo->text + text;
  offset = echo->bytes - static_cast<int64_t>(echo->text.size());
  return gen.take_echo_logprobs(echo->ids);
}

// The request's prompts as the engine got them, and with echo how each leads its choices.
struct Prompts {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::optional<EchoPrompt>> echo;
  std::string chat_echo;  // chat with echo: the final assistant message's content
  int64_t tokens = 0;     // usage: each prompt once
};

// Chat with echo (vLLM's): the final message's content when it is the assistant's, else nothing.
std::string chat_echo_of(const GenerationRequest& g) {
  if (g.endpoint != Endpoint::kChat || !g.echo || g.messages.empty()) return {};
  const Json& last = g.messages.back();
  const bool mine = last.contains("role") && last["role"] == "assistant";
  return mine && last.contains("content") && last["content"].is_string()
             ? last["content"].get<std::string>()
             : std::string();
}

void respond_whole(const HandlerContext& ctx, const ResponseMeta& meta,
                   std::vector<ChoiceRun>& runs, const Prompts& prompts, httplib::Response& res) {
  const int64_t prompt_tokens = prompts.tokens;
  std::vector<Choice> choices;
  for (ChoiceRun& c : runs) {  // the others keep running; their deliveries wait in their channels
    Delivery d = std::move(c.pending);
    std::string text, reasoning;
    const auto take = [&](ReasoningPiece p) {
      text += p.content;
      reasoning += p.reasoning;
    };
    take(c.gen->absorb(d));
    while (!c.gen->finished()) {
      if (c.ch->wait(kPoll, d)) take(c.gen->absorb(d));
    }
    if (d.error) {  // the engine failed after taking the request
      for (ChoiceRun& o : runs) {
        if (!o.gen->finished()) ctx.loop.cancel(o.ch);
      }
      throw ApiError(500, *d.error, "internal_error");
    }
    count_end(ctx, *c.gen);
    int64_t offset = 0;
    Json lps = lead_with_prompt(prompts.echo[c.prompt], *c.gen, text, offset);
    text = prompts.chat_echo + text;
    choices.push_back({std::move(text), c.gen->finish_reason(), std::move(lps),
                       tool_calls_of(*c.gen, false),
                       c.gen->had_reasoning() ? std::optional(std::move(reasoning)) : std::nullopt,
                       c.gen->prompt_logprobs(prompts.ids[c.prompt])});
  }
  record_end(runs, prompt_tokens);
  const Json body =
      response_json(meta, choices, prompt_tokens, completion_tokens(runs), summed_stats(runs));
  res.status = 200;
  res.set_content(dump(body), "application/json");
}

struct StreamState {
  ResponseMeta meta;
  std::vector<ChoiceRun> runs;
  int64_t prompt_tokens;
  bool include_usage;
  // stream_options.continuous_usage_stats (vLLM's, with include_usage): every chunk's usage,
  // its choice's prompt (prompt_sizes[run's prompt]) and completion tokens so far.
  bool continuous_usage = false;
  std::vector<int64_t> prompt_sizes;
  // Per prompt: with echo each choice's first chunk leads with its prompt.
  std::vector<std::optional<EchoPrompt>> echo;
  std::string chat_echo;  // chat with echo: in each choice's first (role) chunk
  FrameRewriter rewrite;  // handle_generation's (none: the frames as they are)
};

// The whole stream in one provider call: httplib stops calling a provider once the server
// shuts down, and a stream must still end with its abort chunk and [DONE]. Choices interleave:
// each chunk carries its choice's index; each choice ends with its own finish chunk, then (with
// include_usage) one usage chunk for all of them, then [DONE].
bool write_stream(const HandlerContext& ctx, StreamState& s, httplib::DataSink& sink) {
  const bool chat = s.meta.endpoint == Endpoint::kChat;
  auto send_frame = [&](const std::string& frame) {
    if (!s.rewrite) return sink.write(frame.data(), frame.size());
    const std::string out = s.rewrite(frame);
    return out.empty() || sink.write(out.data(), out.size());
  };
  // A choice's chunk, with continuous usage stats its usage so far.
  auto send_chunk = [&](Json chunk, const ChoiceRun& c) {
    if (s.continuous_usage) {
      chunk["usage"] = usage_json(s.prompt_sizes[c.prompt], c.gen->completion_tokens());
    }
    return send_frame(sse_event(chunk));
  };
  // One choice blocks on its channel; several poll theirs in turn and sleep 1 ms when none had
  // anything, so that an idle choice never delays the others' chunks.
  const bool several = s.runs.size() > 1;
  const auto poll = several ? std::chrono::milliseconds(0) : kPoll;
  if (chat) {
    for (size_t i = 0; i < s.runs.size(); ++i) {
      if (!send_chunk(chunk_json(s.meta, static_cast<int>(i), s.chat_echo, true, nullptr, ""),
                      s.runs[i])) {
        return false;
      }
      s.runs[i].first_chunk = false;
    }
  }
  size_t open = s.runs.size();
  bool connected = true;
  while (open > 0 && connected) {
    bool any = false;
    for (size_t i = 0; i < s.runs.size() && connected; ++i) {
      ChoiceRun& c = s.runs[i];
      if (c.gen->finished()) continue;
      Delivery d;
      if (c.have_pending) {
        d = std::move(c.pending);
        c.have_pending = false;
      } else if (!c.ch->wait(poll, d)) {
        if (!several) connected = sink.is_writable();  // the client may have gone away
        continue;
      }
      any = true;
      const int index = static_cast<int>(i);
      ReasoningPiece piece = c.gen->absorb(d);
      std::string& text = piece.content;
      // The chunk's logprobs (a choice's first chunk: with echo, the prompt leads).
      const auto take_lps = [&] {
        return c.first_chunk ? lead_with_prompt(s.echo[c.prompt], *c.gen, text, c.offset)
                             : c.gen->take_logprobs(c.offset);
      };
      if (!c.gen->finished()) {
        if (text.empty() && piece.reasoning.empty()) continue;
        const Json lps = take_lps();
        connected = send_chunk(
            chunk_json(s.meta, index, text, c.first_chunk, lps, "", nullptr, piece.reasoning), c);
        c.offset += static_cast<int64_t>(text.size());
        c.first_chunk = false;
        continue;
      }
      if (!c.gen->tool_calls().empty()) {  // content still held, then the calls, then the end
        const Json lps = take_lps();
        connected = send_chunk(chunk_json(s.meta, index, text, c.first_chunk, lps, "",
                                          tool_calls_of(*c.gen, true), piece.reasoning),
                               c);
        c.offset += static_cast<int64_t>(text.size());
        c.first_chunk = false;
        text.clear();
        piece.reasoning.clear();
      }
      const Json lps = take_lps();
      Json last = chunk_json(s.meta, index, text, c.first_chunk, lps, c.gen->finish_reason(),
                             nullptr, piece.reasoning);
      if (!s.include_usage) last["speculation"] = speculation_json(c.gen->stats());
      count_end(ctx, *c.gen);
      --open;
      connected = send_chunk(std::move(last), c);
    }
    if (several && !any && open > 0 && connected) {
      connected = sink.is_writable();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (open == 0) {
    record_end(s.runs, s.prompt_tokens);
    if (!connected) return false;  // the last finish chunk did not go out
    if (s.include_usage) {
      Json usage = usage_chunk_json(s.meta, s.prompt_tokens, completion_tokens(s.runs));
      usage["speculation"] = speculation_json(summed_stats(s.runs));
      if (!send_frame(sse_event(usage))) return false;
    }
    if (!send_frame(kSseDone)) return false;
    sink.done();
    return true;
  }
  // Disconnected: free the engine's slots and blocks at the next step boundary.
  AccessRecord& rec = access_record();
  rec.prompt_tokens = s.prompt_tokens;
  rec.completion_tokens = 0;
  for (ChoiceRun& c : s.runs) {
    rec.completion_tokens += c.gen->completion_tokens();
    if (c.gen->finished()) continue;
    ctx.loop.cancel(c.ch);
    ctx.metrics.request_cancelled();
  }
  rec.finish_reason = "cancelled";
  return false;
}

}  // namespace

void handle_generation(const HandlerContext& ctx, Endpoint endpoint, std::string_view raw,
                       httplib::Response& res, FrameRewriter rewrite) {
  const double arrival = monotonic_seconds();
  const Json body = parse_body(raw);
  const GenerationRequest g = parse_generation_request(body, endpoint, ctx.limits);
  // Completions may carry several prompts: each its engine request (and n choices).
  const size_t n_prompts = endpoint == Endpoint::kChat ? 1 : g.prompts.size();
  std::vector<Request> reqs;
  std::vector<char> opens_think;  // per prompt (reasoning.h)
  Prompts prompts;
  for (size_t p = 0; p < n_prompts; ++p) {
    bool opens = false;
    reqs.push_back(engine_request(ctx, g, p, opens));
    opens_think.push_back(opens ? 1 : 0);
    prompts.ids.push_back(reqs.back().prompt);
    prompts.tokens += static_cast<int64_t>(reqs.back().prompt.size());
  }
  const ResponseMeta meta{.endpoint = endpoint,
                          .id = random_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-"),
                          .created = unix_now(),
                          .model = ctx.opt.served_model_name};
  access_record().id = meta.id;
  access_record().prompt_tokens = prompts.tokens;
  // n choices per prompt: n engine requests, choice i sampling with seed + i (as vLLM's child
  // requests), all submitted before any acceptance is awaited (so they join the same step); any
  // refused cancels the others. Choice index: prompt p's choice i is p n + i (OpenAI's order).
  std::vector<ChoiceRun> runs(n_prompts * static_cast<size_t>(g.n));
  try {
    for (size_t p = 0; p < n_prompts; ++p) {
      for (int i = 0; i < g.n; ++i) {
        ChoiceRun& c = runs[p * static_cast<size_t>(g.n) + static_cast<size_t>(i)];
        Request ri = reqs[p];
        ri.sampling.seed = reqs[p].sampling.seed + static_cast<uint64_t>(i);
        c.prompt = p;
        c.ch = ctx.loop.submit(std::move(ri), arrival);
      }
    }
    for (ChoiceRun& c : runs) {
      c.pending = await_acceptance(c.ch);
      c.gen = std::make_unique<Generation>(ctx, g, reqs[c.prompt].stop_ids, c.ch,
                                           opens_think[c.prompt] != 0);
    }
  } catch (...) {
    for (ChoiceRun& c : runs) {
      if (c.ch != nullptr) ctx.loop.cancel(c.ch);
    }
    throw;
  }
  for (size_t p = 0; p < n_prompts; ++p) {
    prompts.echo.push_back(endpoint == Endpoint::kChat ? std::nullopt
                                                       : echo_prompt_of(ctx, g, p, prompts.ids[p]));
  }
  prompts.chat_echo = chat_echo_of(g);
  std::vector<int64_t> prompt_sizes;
  for (const std::vector<int32_t>& p : prompts.ids) {
    prompt_sizes.push_back(static_cast<int64_t>(p.size()));
  }
  if (!g.stream) return respond_whole(ctx, meta, runs, prompts, res);
  auto state = std::make_shared<StreamState>(StreamState{.meta = meta,
                                                         .runs = std::move(runs),
                                                         .prompt_tokens = prompts.tokens,
                                                         .include_usage = g.include_usage,
                                                         .continuous_usage = g.continuous_usage,
                                                         .prompt_sizes = prompt_sizes,
                                                         .echo = std::move(prompts.echo),
                                                         .chat_echo = prompts.chat_echo,
                                                         .rewrite = std::move(rewrite)});
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, state](size_t, httplib::DataSink& sink) {
        try {
          return write_stream(ctx, *state, sink);
        } catch (const std::exception& e) {  // nothing may escape into httplib's writer
          std::fprintf(stderr, "tandem serve: stream %s failed: %s\n", state->meta.id.c_str(),
                       e.what());
          for (ChoiceRun& c : state->runs) ctx.loop.cancel(c.ch);
          return false;
        }
      },
      [&ctx, state](bool success) {
        // The provider never ran (the connection failed first): the requests must not linger.
        if (success) return;
        for (ChoiceRun& c : state->runs) {
          if (c.gen != nullptr && !c.gen->finished()) ctx.loop.cancel(c.ch);
        }
      });
}

}  // namespace tandem::server
