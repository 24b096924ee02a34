// What a caller hands the engine (a request) and what it gets back (tokens, finish, stats).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spec/logprobs.h"
#include "spec/sampler.h"

namespace tandem {

class JsonSchema;
using RequestId = int64_t;

struct Request {
  std::vector<int32_t> prompt;
  int max_tokens = 16;  // generated tokens, the first one (from the prompt's last row) included
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  // Log-probabilities of each generated token (of the model's raw distribution, before
  // penalties, temperature and top-k/p, as vLLM reports them): -1 off, else also this many of
  // the most likely tokens per position (0..20).
  int logprobs = -1;
  // Log-probabilities of the prompt's tokens (what a completions request with echo and logprobs
  // reports, and lm-eval's loglikelihood reads): -1 off, else as `logprobs` for every prompt
  // token after the first, each from the row before it (teacher forcing). The prompt's chunks
  // then run at most one granule a step (their every row's logits are read).
  int prompt_logprobs = -1;
  // JSON mode (response_format json_object): the output is one JSON object, then a stop id
  // (spec/json_constraint.h); needs BatchEngineOptions::token_bytes.
  bool json_object = false;
  // With json_object, structured output (response_format json_schema): the output is one JSON
  // value this schema accepts (spec/json_schema.h) instead of any object.
  std::shared_ptr<const JsonSchema> json_schema;
  // With json_object: the answer starts inside a think block (the rendered prompt opened one and
  // a reasoning parser splits it off); the object follows "</think>".
  bool json_after_think = false;
  // The most drafts a step for this request (-1: the engine's; 0: none): a request whose drafts
  // are seldom accepted (a long document, high temperature) can leave its verify rows out of a
  // batch. Speculation is exact, so this changes the speed only, never the tokens.
  int max_draft_tokens = -1;
};

struct GenerationStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;  // admission to first token, then to the end
  int64_t steps = 0, drafting_steps = 0, draft_tokens = 0, accepted_tokens = 0;
  int64_t preemptions = 0;
  int64_t cached_tokens = 0;  // prompt tokens restored from the prefix cache, not prefilled
  std::vector<int64_t> accepted_per_position;  // [k]
  std::vector<int64_t> steps_per_k;            // [k + 1]: steps that drafted 0..k tokens
  double mean_acceptance_length() const {
    return drafting_steps ? 1.0 + static_cast<double>(accepted_tokens) / drafting_steps : 1.0;
  }
};

// What one engine step produced for one request.
struct RequestOutput {
  RequestId id = -1;
  std::vector<int32_t> new_tokens;
  std::vector<TokenLogprobs> logprobs;  // one per new token when the request asked for them
  // With the first token, when the request asked for them: prompt tokens 1 .. n - 1's.
  std::vector<TokenLogprobs> prompt_logprobs;
  bool finished = false;
  std::string finish_reason;  // "stop" | "length" | "cancelled"
  GenerationStats stats;      // when finished: the request's statistics
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  GenerationStats stats;
  std::string finish_reason;  // "stop" | "length" | "cancelled"
};

}  // namespace tandem
