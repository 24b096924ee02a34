// `tandem generate --prompts FILE.jsonl`: the offline batch mode. Every line of the file is one
// request; all of them run through the batched engine at once (continuous batching: they join
// and leave as slots free up), with a progress bar on stderr; the results come out one JSON line
// per request, in input order, then the throughput. A line that is not a valid request stops the
// run before anything is generated, naming the line and the field.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "apps/cli_common.h"
#include "apps/generate_options.h"
#include "core/clock.h"
#include "engine/batch_engine.h"
#include "engine/generator.h"
#include "spec/oracle_drafter.h"
#include "tokenizer/chat_template.h"

namespace tandem::app {

namespace {

struct BatchItem {
  nlohmann::json id;  // echoed back (null when the line has none)
  Request req;
};

template <typename T>
T field(const nlohmann::json& j, const char* name, T fallback, int64_t line) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  try {
    return j[name].get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("--prompts line {}: field '{}' has the wrong type ({})", line, name, j[name].dump());
  }
}

// tokenizer may be null (tokenizer_error says why): then a text prompt is an error.
std::vector<BatchItem> read_requests(const GenerateOptions& g, const tok::Tokenizer* tokenizer,
                                     const std::string& tokenizer_error) {
  std::ifstream in(g.prompts);
  TANDEM_CHECK(in.good(), "cannot read --prompts file '{}'", g.prompts);
  std::vector<BatchItem> items;
  std::string text;
  int64_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("--prompts line {}: not valid JSON ({})", line, e.what());
    }
    TANDEM_CHECK(j.is_object(), "--prompts line {}: expected a JSON object", line);
    BatchItem it;
    it.id = j.contains("id") ? j["id"] : nlohmann::json();
    const bool has_text = j.contains("prompt"), has_ids = j.contains("prompt_ids");
    TANDEM_CHECK(has_text != has_ids, "--prompts line {}: give exactly one of prompt, prompt_ids",
                 line);
    if (has_text) {
      TANDEM_CHECK(tokenizer != nullptr, "--prompts line {}: a text prompt needs the tokenizer: {}",
                   line, tokenizer_error);
      std::string p = field<std::string>(j, "prompt", "", line);
      if (field<bool>(j, "chat", g.chat, line)) {
        const nlohmann::ordered_json messages =
            nlohmann::ordered_json::array({{{"role", "user"}, {"content", p}}});
        p = tok::render_chat(*tokenizer, messages, /*add_generation_prompt=*/true);
      }
      it.req.prompt = tokenizer->encode(p);
    } else {
      it.req.prompt = field<std::vector<int32_t>>(j, "prompt_ids", {}, line);
    }
    it.req.max_tokens = field<int>(j, "max_tokens", g.max_tokens, line);
    it.req.sampling =
        SamplingParams{.temperature = field<float>(j, "temperature", g.temperature, line),
                       .top_k = field<int>(j, "top_k", g.top_k, line),
                       .top_p = field<float>(j, "top_p", g.top_p, line),
                       .seed = field<uint64_t>(j, "seed", g.seed, line),
                       .min_tokens = field<int>(j, "min_tokens", 0, line)};
    TANDEM_CHECK(it.req.max_tokens >= 1, "--prompts line {}: max_tokens must be >= 1, got {}", line,
                 it.req.max_tokens);
    it.req.max_draft_tokens = field<int>(j, "num_speculative_tokens", -1, line);  // -1: k
    TANDEM_CHECK(it.req.max_draft_tokens >= -1,
                 "--prompts line {}: num_speculative_tokens must be >= 0, got {}", line,
                 it.req.max_draft_tokens);
    it.req.json_object = field<bool>(j, "json_object", false, line);  // JSON mode
    TANDEM_CHECK(!it.req.json_object || tokenizer != nullptr,
                 "--prompts line {}: json_object needs the tokenizer: {}", line, tokenizer_error);
    try {
      check_sampling_params(it.req.sampling);
    } catch (const Error& e) {
      fail("--prompts line {}: {}", line, e.what());
    }
    items.push_back(std::move(it));
  }
  TANDEM_CHECK(!items.empty(), "--prompts file '{}' holds no request", g.prompts);
  return items;
}

void progress(int64_t done, int64_t total, int64_t tokens, double seconds) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
  std::fprintf(stderr, "\r[%.*s%*s] %lld/%lld requests, %lld tokens, %.1f tok/s", filled,
               "==============================", kWidth - filled, "", static_cast<long long>(done),
               static_cast<long long>(total), static_cast<long long>(tokens),
               seconds > 0 ? tokens / seconds : 0.0);
  std::fflush(stderr);
}

}  // namespace

void run_batch(const GenerateOptions& g) {
  TANDEM_CHECK(g.prompt.empty() && g.prompt_ids.empty(),
               "--prompts replaces --prompt and --prompt-ids");
  std::unique_ptr<tok::Tokenizer> tokenizer;  // for text prompts, and the results' text
  std::string tokenizer_error;
  try {
    tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_dir(g.model_dir));
  } catch (const Error& e) {
    tokenizer_error = e.what();
  }
  // Every line is checked before the model loads.
  std::vector<BatchItem> items = read_requests(g, tokenizer.get(), tokenizer_error);
  auto model = open_model(g, true);
  std::vector<int32_t> stop = g.ignore_eos ? std::vector<int32_t>{} : model->config().eos_token_ids;
  for (BatchItem& it : items) it.req.stop_ids = stop;
  const int k = g.speculative == "none" ? 0 : g.num_speculative_tokens;
  apply_kernel_flags(g);  // before the graphs are captured
  std::unique_ptr<Drafter> drafter = make_drafter(g, *model);
  const int64_t max_seqs = g.max_num_seqs > 0 ? g.max_num_seqs : 8;
  if (auto* oracle = dynamic_cast<OracleDrafter*>(drafter.get())) {
    // The oracle proposes from each request's own plain continuation.
    BatchEngine plain(*model, nullptr, engine_options(g, 0, max_seqs));
    std::vector<Request> refs;
    for (const BatchItem& it : items) {
      Request r = it.req;
      r.max_tokens += k + 1;
      r.stop_ids.clear();
      refs.push_back(std::move(r));
    }
    const std::vector<GenerateResult> ref = plain.run(std::move(refs));
    for (size_t i = 0; i < ref.size(); ++i)
      oracle->set_reference(static_cast<SeqId>(i), ref[i].tokens);  // ids count from 0
  }
  BatchEngineOptions eo = engine_options(g, k, max_seqs);
  if (std::any_of(items.begin(), items.end(), [](const BatchItem& it) {
        return it.req.json_object;
      })) {  // JSON mode reads each token id's text
    eo.token_bytes = token_texts(*tokenizer, model->config().vocab_size);
  }
  BatchEngine engine(*model, std::move(drafter), eo);
  std::fprintf(stderr, "%s\n", engine.describe().c_str());
  std::vector<RequestId> ids;
  std::map<RequestId, size_t> index;
  for (BatchItem& it : items) {
    ids.push_back(engine.add(it.req));
    index[ids.back()] = ids.size() - 1;
  }
  const double t0 = monotonic_seconds();
  int64_t done = 0, tokens = 0;
  const int64_t total = static_cast<int64_t>(items.size());
  std::vector<std::string> finish(items.size());
  progress(0, total, 0, 0);
  double shown = t0;
  while (!engine.idle()) {
    int64_t finished = 0;
    for (const RequestOutput& o : engine.step()) {
      tokens += static_cast<int64_t>(o.new_tokens.size());
      if (!o.finished) continue;
      ++finished;
      finish[index.at(o.id)] = o.finish_reason;
    }
    done += finished;
    const double t = monotonic_seconds();
    if (finished > 0 || t - shown > 0.25) {  // a few updates a second at most
      progress(done, total, tokens, t - t0);
      shown = t;
    }
  }
  const double wall = monotonic_seconds() - t0;
  std::fprintf(stderr, "\n");
  std::ofstream file;
  if (!g.output.empty()) {
    file.open(g.output);
    TANDEM_CHECK(file.good(), "cannot write --output file '{}'", g.output);
  }
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    GenerateResult r{engine.generated(ids[i]), engine.stats(ids[i]), finish[i]};
    prompt_tokens += r.stats.prompt_tokens;
    nlohmann::json j{{"index", i},
                     {"tokens", r.tokens},
                     {"finish_reason", r.finish_reason},
                     {"stats", stats_json(r, k)}};
    if (!items[i].id.is_null()) j["id"] = items[i].id;
    if (tokenizer) j["text"] = tokenizer->decode(r.tokens, true);
    const std::string line = j.dump();
    if (file.is_open()) {
      file << line << "\n";
    } else {
      std::printf("%s\n", line.c_str());
    }
  }
  const EngineCounters& c = engine.counters();
  std::fprintf(stderr,
               "%lld requests: %lld prompt + %lld generated tokens in %.2f s | %.1f generated "
               "tok/s | %.1f total tok/s | %lld steps (%lld from graphs), %lld preemptions",
               static_cast<long long>(total), static_cast<long long>(prompt_tokens),
               static_cast<long long>(tokens), wall, tokens / wall, (tokens + prompt_tokens) / wall,
               static_cast<long long>(c.steps), static_cast<long long>(c.graph_steps),
               static_cast<long long>(c.preemptions));
  if (k > 0 && c.drafting_steps > 0) {
    std::fprintf(stderr, " | mean acceptance length %.2f (k=%d)",
                 1.0 + static_cast<double>(c.accepted_tokens) / c.drafting_steps, k);
  }
  if (k > 0) {  // what speculation control chose, and what drafting cost
    std::string per_k;
    for (int64_t n : c.decode_steps_per_k)
      per_k += fmt::format("{}{}", per_k.empty() ? "" : "/", n);
    std::fprintf(stderr,
                 " | decode steps by drafts 0..%d: %s (%lld with prefill) | steps %.3f s, drafting "
                 "%.3f s, catch-up %.3f s",
                 k, per_k.c_str(), static_cast<long long>(c.mixed_steps), c.step_seconds,
                 c.draft_seconds, c.catch_up_seconds);
  }
  std::fprintf(stderr, "\n");
}

}  // namespace tandem::app
