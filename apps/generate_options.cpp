// Registration and validation of the generation options.
#include "apps/generate_options.h"

namespace tandem::app {

void add_generate_options(CLI::App* cmd, GenerateOptions& g) {
  add_common_options(cmd, g);
  cmd->add_option("--prompt-ids", g.prompt_ids, "comma-separated prompt token ids");
  cmd->add_option("--max-tokens", g.max_tokens, "tokens to generate")->capture_default_str();
  cmd->add_flag("--json", g.json, "print {\"tokens\": [...], \"stats\": {...}}");
  cmd->add_option("--speculative", g.speculative, "mtp | none | oracle (tests)")->capture_default_str();
  cmd->add_option("--num-speculative-tokens", g.num_speculative_tokens, "drafts per step, 1..8")
      ->capture_default_str();
  cmd->add_option("--oracle-pattern", g.oracle_pattern,
                  "oracle acceptance: all | none | first:J | random:SEED | seq:a,b,..")
      ->capture_default_str();
  cmd->add_option("--spec-trace", g.spec_trace, "write one JSON line per step to this file");
  cmd->add_option("--temperature", g.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", g.top_k, "0 = off")->capture_default_str();
  cmd->add_option("--top-p", g.top_p, "1 = off")->capture_default_str();
  cmd->add_option("--seed", g.seed, "sampling seed")->capture_default_str();
  cmd->add_flag("--ignore-eos", g.ignore_eos, "do not stop at the model's end-of-sequence tokens");
}

GenerateRequest build_request(const GenerateOptions& g) {
  GenerateRequest req;
  TANDEM_CHECK(!g.prompt_ids.empty(), "give a prompt with --prompt-ids");
  req.prompt = parse_ids(g.prompt_ids);
  req.max_tokens = g.max_tokens;
  req.sampling = SamplingParams{.temperature = g.temperature, .top_k = g.top_k, .top_p = g.top_p, .seed = g.seed};
  check_sampling_params(req.sampling);
  TANDEM_CHECK(g.max_tokens >= 1, "--max-tokens must be >= 1, got {}", g.max_tokens);
  return req;
}

}  // namespace tandem::app
