// `tandem generate`: greedy or seeded sampling, with optional speculative decoding (MTP, or the
// oracle drafter used by tests), printing tokens or a JSON record with stats. One prompt here;
// --prompts FILE.jsonl runs a whole batch through the engine (cmd_generate_batch.cpp).
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/cli_common.h"
#include "apps/commands.h"
#include "apps/generate_options.h"
#include "engine/batch_engine.h"
#include "engine/generator.h"
#include "spec/mtp_drafter.h"
#include "spec/oracle_drafter.h"
#include "tokenizer/stream_decoder.h"

namespace tandem::app {

nlohmann::json stats_json(const GenerateResult& r, int k) {
  const GenerationStats& s = r.stats;
  nlohmann::json j{{"prompt_tokens", s.prompt_tokens},
                   {"generated_tokens", s.generated_tokens},
                   {"prefill_seconds", s.prefill_seconds},
                   {"decode_seconds", s.decode_seconds},
                   {"prefill_tokens_per_second",
                    s.prefill_seconds > 0 ? s.prompt_tokens / s.prefill_seconds : 0.0},
                   {"decode_tokens_per_second",
                    s.decode_seconds > 0 ? (s.generated_tokens - 1) / s.decode_seconds : 0.0},
                   {"finish_reason", r.finish_reason},
                   {"num_speculative_tokens", k},
                   {"steps", s.steps}};
  if (s.cached_tokens > 0) j["cached_tokens"] = s.cached_tokens;  // --enable-prefix-caching
  if (k > 0) {
    std::vector<double> per_pos;
    for (int64_t a : s.accepted_per_position)
      per_pos.push_back(s.drafting_steps ? static_cast<double>(a) / s.drafting_steps : 0.0);
    j["mean_acceptance_length"] = s.mean_acceptance_length();
    j["per_position_acceptance"] = per_pos;
    j["draft_tokens"] = s.draft_tokens;
    j["accepted_tokens"] = s.accepted_tokens;
    j["drafting_steps"] = s.drafting_steps;
    j["steps_per_k"] = s.steps_per_k;
  }
  return j;
}

GenerateResult run_generation(Qwen35Model& model, const GenerateOptions& g,
                              const GenerateRequest& req, std::ostream* trace,
                              const std::function<void(int32_t)>& on_token) {
  const int k = g.speculative == "none" ? 0 : g.num_speculative_tokens;
  apply_kernel_flags(g);  // before the graphs are captured
  std::unique_ptr<Drafter> drafter = make_drafter(g, model);
  if (auto* oracle = dynamic_cast<OracleDrafter*>(drafter.get())) {
    // The oracle proposes from the target's own plain continuation.
    Generator plain(model, nullptr, GeneratorOptions{.max_context = g.max_context});
    GenerateRequest ref_req = req;
    ref_req.max_tokens = req.max_tokens + k + 1;
    ref_req.stop_ids.clear();
    oracle->set_reference(0, plain.generate(ref_req).tokens);  // the engine's first request
  }
  BatchEngineOptions eo = engine_options(g, k, std::max<int64_t>(g.max_num_seqs, 1));
  eo.trace = trace;
  Generator gen(model, std::move(drafter), eo);
  if (!g.json) {
    std::fprintf(stderr, "%s\n", gen.engine().describe().c_str());
    if (model.context().device == Device::kCuda) {
      std::fprintf(stderr, "programmatic dependent launch %s\n",
                   cuda_programmatic_launch() ? "on" : "off");
    }
  }
  return gen.generate(req, on_token);  // the engine's first request: the oracle's reference 0
}

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "generate tokens from a prompt");
  auto g = std::make_shared<GenerateOptions>();
  add_generate_options(cmd, *g);
  cmd->callback([g] {
    if (!g->prompts.empty()) return run_batch(*g);
    const auto tokenizer = tokenizer_for(*g);
    GenerateRequest req = build_request(*g, tokenizer.get());
    auto model = open_model(*g, !g->json);
    if (!g->ignore_eos) req.stop_ids = model->config().eos_token_ids;
    std::unique_ptr<std::ofstream> trace;
    if (!g->spec_trace.empty()) {
      trace = std::make_unique<std::ofstream>(g->spec_trace);
      TANDEM_CHECK(trace->good(), "cannot write --spec-trace file '{}'", g->spec_trace);
    }
    const int k = g->speculative == "none" ? 0 : g->num_speculative_tokens;
    // Text prompts stream text as it is generated; id prompts print ids at the end.
    std::unique_ptr<tok::StreamDecoder> stream;
    if (tokenizer && !g->json) {
      stream = std::make_unique<tok::StreamDecoder>(*tokenizer, /*skip_special=*/true);
      std::printf("%s", g->prompt.c_str());
    }
    auto on_token = [&](int32_t id) {
      if (!stream) return;
      std::printf("%s", stream->push(id).c_str());
      std::fflush(stdout);
    };
    GenerateResult r = run_generation(*model, *g, req, trace.get(), on_token);
    if (stream) {
      std::printf("%s\n", stream->flush().c_str());
      const GenerationStats& s = r.stats;
      std::fprintf(
          stderr, "\n%lld prompt + %lld generated tokens | prefill %.1f tok/s | decode %.1f tok/s",
          static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.generated_tokens),
          s.prefill_seconds > 0 ? s.prompt_tokens / s.prefill_seconds : 0.0,
          s.decode_seconds > 0 ? (s.generated_tokens - 1) / s.decode_seconds : 0.0);
      if (k > 0)
        std::fprintf(stderr, " | mean acceptance length %.2f (k=%d)", s.mean_acceptance_length(),
                     k);
      std::fprintf(stderr, "\n");
    } else if (g->json) {
      nlohmann::json out{{"tokens", r.tokens}, {"stats", stats_json(r, k)}};
      if (tokenizer) out["text"] = tokenizer->decode(r.tokens, true);
      std::printf("%s\n", out.dump().c_str());
    } else {
      for (size_t i = 0; i < r.tokens.size(); ++i) std::printf("%s%d", i ? " " : "", r.tokens[i]);
      std::printf("\n");
      const auto s = stats_json(r, k);
      std::fprintf(stderr, "%s\n", s.dump().c_str());
    }
  });
}

}  // namespace tandem::app
