// OpenAI JSON rendering (openai_render.h).
#include "server/openai_render.h"

#include <algorithm>

#include "server/text_stream.h"

namespace tandem::server {

namespace {

// As vLLM: -inf (a token the model rules out) is written as -9999.
double finite_logprob(float lp) { return std::max<double>(lp, -9999.0); }

Json byte_list(const std::string& bytes) {
  Json out = Json::array();
  for (char c : bytes) out.push_back(static_cast<unsigned char>(c));
  return out;
}

Json chat_entry(const TextCodec& codec, const TokenLogprob& t) {
  const std::string bytes = codec.token_bytes(t.id, /*skip_special=*/false);
  return {{"token", utf8_lossy(bytes)},
          {"logprob", finite_logprob(t.logprob)},
          {"bytes", byte_list(bytes)}};
}

Json base(const ResponseMeta& m, bool chunk) {
  const bool chat = m.endpoint == Endpoint::kChat;
  return {
      {"id", m.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", m.created},
      {"model", m.model}};
}

}  // namespace

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

std::string sse_event(const Json& j) { return "data: " + dump(j) + "\n\n"; }

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

Json speculation_json(const GenerationStats& s) {
  return {{"draft_tokens", s.draft_tokens},
          {"accepted_tokens", s.accepted_tokens},
          {"drafting_steps", s.drafting_steps},
          {"mean_acceptance_length", s.mean_acceptance_length()}};
}

Json logprobs_json(Endpoint endpoint, const TextCodec& codec, std::span<const TokenLogprobs> lps,
                   int64_t text_offset) {
  if (endpoint == Endpoint::kChat) {
    Json content = Json::array();
    for (const TokenLogprobs& t : lps) {
      Json e = chat_entry(codec, t.chosen);
      Json top = Json::array();
      for (const TokenLogprob& alt : t.top) top.push_back(chat_entry(codec, alt));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", std::move(content)}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  int64_t offset = text_offset;
  for (const TokenLogprobs& t : lps) {
    const std::string bytes = codec.token_bytes(t.chosen.id, /*skip_special=*/false);
    tokens.push_back(utf8_lossy(bytes));
    token_logprobs.push_back(finite_logprob(t.chosen.logprob));
    // As vLLM: the requested alternatives plus the chosen token.
    Json alts = Json::object();
    for (const TokenLogprob& alt : t.top) {
      alts[utf8_lossy(codec.token_bytes(alt.id, false))] = finite_logprob(alt.logprob);
    }
    alts[utf8_lossy(bytes)] = finite_logprob(t.chosen.logprob);
    top.push_back(std::move(alts));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(codec.token_bytes(t.chosen.id, true).size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

Json echo_logprobs_json(const TextCodec& codec, std::span<const int32_t> prompt,
                        std::span<const TokenLogprobs> prompt_lps,
                        std::span<const TokenLogprobs> generated) {
  // The prompt's own entries: its tokens as echoed (special tokens included, so offsets count
  // them), token i's logprob and alternatives from prompt_lps[i - 1] (null for the first token,
  // and for any a request ended before its prompt was scored).
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  int64_t offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string bytes = codec.token_bytes(prompt[i], /*skip_special=*/false);
    tokens.push_back(utf8_lossy(bytes));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(bytes.size());
    if (i == 0 || i > prompt_lps.size()) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    const Json one = logprobs_json(Endpoint::kCompletion, codec, prompt_lps.subspan(i - 1, 1), 0);
    token_logprobs.push_back(one["token_logprobs"][0]);
    top.push_back(one["top_logprobs"][0]);
  }
  const Json g = logprobs_json(Endpoint::kCompletion, codec, generated, offset);
  Json j = {{"tokens", std::move(tokens)},
            {"token_logprobs", std::move(token_logprobs)},
            {"top_logprobs", std::move(top)},
            {"text_offset", std::move(offsets)}};
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    for (const Json& e : g[key]) j[key].push_back(e);
  }
  return j;
}

Json prompt_logprobs_json(const TextCodec& codec, std::span<const int32_t> prompt,
                          std::span<const TokenLogprobs> prompt_lps, int top_n) {
  const auto entry = [&](const TokenLogprob& t) {
    return Json{{"logprob", finite_logprob(t.logprob)},
                {"rank", t.rank},
                {"decoded_token", utf8_lossy(codec.token_bytes(t.id, /*skip_special=*/false))}};
  };
  Json out = Json::array();
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (i == 0 || i > prompt_lps.size()) {
      out.push_back(nullptr);
      continue;
    }
    const TokenLogprobs& t = prompt_lps[i - 1];
    Json e = Json::object();
    e[std::to_string(t.chosen.id)] = entry(t.chosen);
    const size_t n = std::min(t.top.size(), static_cast<size_t>(std::max(top_n, 0)));
    for (size_t j = 0; j < n; ++j) {
      const std::string key = std::to_string(t.top[j].id);
      if (!e.contains(key)) e[key] = entry(t.top[j]);
    }
    out.push_back(std::move(e));
  }
  return out;
}

Json response_json(const ResponseMeta& m, std::span<const Choice> choices, int64_t prompt_tokens,
                   int64_t completion_tokens, const GenerationStats& stats) {
  Json j = base(m, false);
  j["choices"] = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    Json choice = {{"index", i}};
    if (m.endpoint == Endpoint::kChat) {
      const Choice& c = choices[i];
      const bool calls = !c.tool_calls.is_null();
      choice["message"] = {{"role", "assistant"},
                           {"content", calls && c.text.empty() ? Json() : Json(c.text)}};
      if (c.reasoning) choice["message"]["reasoning_content"] = *c.reasoning;
      if (calls) choice["message"]["tool_calls"] = c.tool_calls;
    } else {
      choice["text"] = choices[i].text;
    }
    choice["logprobs"] = choices[i].logprobs;
    choice["finish_reason"] = choices[i].finish;
    // vLLM's prompt_logprobs: on each choice of a completion, on a chat response (below).
    if (!choices[i].prompt_logprobs.is_null() && m.endpoint == Endpoint::kCompletion) {
      choice["prompt_logprobs"] = choices[i].prompt_logprobs;
    }
    j["choices"].push_back(std::move(choice));
  }
  if (m.endpoint == Endpoint::kChat && !choices.empty() && !choices[0].prompt_logprobs.is_null()) {
    j["prompt_logprobs"] = choices[0].prompt_logprobs;
  }
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  if (stats.cached_tokens > 0) {  // OpenAI's field: prompt tokens from the prefix cache
    j["usage"]["prompt_tokens_details"] = {{"cached_tokens", stats.cached_tokens}};
  }
  j["speculation"] = speculation_json(stats);
  return j;
}

Json chunk_json(const ResponseMeta& m, int index, const std::string& text, bool first,
                const Json& logprobs, const std::string& finish, const Json& tool_calls,
                const std::string& reasoning) {
  Json j = base(m, true);
  Json choice = {{"index", index}};
  if (m.endpoint == Endpoint::kChat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish.empty())) delta["content"] = text;
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!tool_calls.is_null()) delta["tool_calls"] = tool_calls;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish.empty() ? Json() : Json(finish);
  j["choices"] = Json::array({std::move(choice)});
  return j;
}

Json usage_chunk_json(const ResponseMeta& m, int64_t prompt_tokens, int64_t completion_tokens) {
  Json j = base(m, true);
  j["choices"] = Json::array();
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  return j;
}

Json models_json(const std::string& name, int64_t created, int64_t max_model_len) {
  return {{"object", "list"},
          {"data", Json::array({{{"id", name},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "tandem"},
                                 {"max_model_len", max_model_len}}})}};
}

}  // namespace tandem::server
