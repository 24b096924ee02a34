// Registration and validation of the generation options.
#include "apps/generate_options.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "spec/mtp_drafter.h"
#include "spec/oracle_drafter.h"
#include "tokenizer/chat_template.h"

namespace tandem::app {

void add_engine_flags(CLI::App* cmd, EngineFlags& g, const std::string& max_num_seqs_help,
                      bool oracle) {
  add_common_options(cmd, g);
  cmd->add_option("--speculative", g.speculative,
                  oracle ? "mtp | none | oracle (tests)" : "mtp | none")
      ->capture_default_str();
  cmd->add_option("--num-speculative-tokens", g.num_speculative_tokens, "drafts per step, 1..8")
      ->capture_default_str();
  if (oracle) {
    cmd->add_option("--oracle-pattern", g.oracle_pattern,
                    "oracle acceptance: all | none | first:J | random:SEED | seq:a,b,..")
        ->capture_default_str();
  }
  cmd->add_option(
         "--speculation-control", g.speculation_control,
         "adaptive: drafts per step chosen in 0..K from measured costs and acceptance (never "
         "slower than plain); fixed: always K")
      ->capture_default_str();
  cmd->add_option("--speculative-token-map", g.speculative_token_map,
                  "mtp: a JSON file holding an array of token ids, the only tokens a draft may be "
                  "(e.g. the most frequent ones); each draft's logits then cost those rows of "
                  "lm_head instead of the whole vocabulary. Outputs do not change");
  cmd->add_flag("--no-cuda-graphs", g.no_cuda_graphs,
                "on cuda, launch decode/verify steps and MTP drafts eagerly");
  cmd->add_flag("--no-pdl", g.no_pdl,
                "on cuda, launch each kernel only after the previous one has finished (no "
                "programmatic dependent launch)");
  cmd->add_option("--fp8-prefill", g.fp8_prefill,
                  "cuda, FP8 checkpoints: prefill rows on the tensor cores with FP8 activations "
                  "(per 128-k block, the checkpoints' dynamic scheme; faster), or dequantize: the "
                  "matrix dequantised to bf16 and bf16 activations (the CPU reference's "
                  "numerics). Decode and verify rows always keep bf16 activations")
      ->check(CLI::IsMember({"tensor-cores", "dequantize"}))
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", g.max_num_seqs, max_num_seqs_help);
  cmd->add_option("--kv-blocks", g.kv_blocks,
                  "KV cache blocks of 64 positions (default: from --gpu-memory-utilization on "
                  "cuda, every sequence at --max-model-len on cpu)");
  cmd->add_option("--gpu-memory-utilization", g.gpu_memory_utilization,
                  "cuda: fraction of the free device memory the cache may take")
      ->capture_default_str();
  cmd->add_flag("--enable-prefix-caching", g.enable_prefix_caching,
                "keep each prompt's state at its last 64-token boundary (in host memory) and "
                "start a later prompt with the same tokens from it; outputs are the same bits");
  cmd->add_option("--prefix-cache-gb", g.prefix_cache_gb,
                  "host memory the kept prefixes may take (least recently used evicted first)")
      ->capture_default_str();
}

void add_generate_options(CLI::App* cmd, GenerateOptions& g) {
  add_engine_flags(cmd, g, "sequences resident at once (default 1 for --prompt, 8 for --prompts)",
                   /*oracle=*/true);
  cmd->add_option("--prompt-ids", g.prompt_ids, "comma-separated prompt token ids");
  cmd->add_option("--prompt", g.prompt, "prompt text (tokenized with the model's tokenizer.json)");
  cmd->add_flag("--chat", g.chat, "apply the model's chat template to --prompt (one user message)");
  cmd->add_option("--max-tokens", g.max_tokens, "tokens to generate")->capture_default_str();
  cmd->add_flag("--json", g.json, "print {\"tokens\": [...], \"stats\": {...}}");
  cmd->add_option("--spec-trace", g.spec_trace, "write one JSON line per step to this file");
  cmd->add_option("--temperature", g.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", g.top_k, "0 = off")->capture_default_str();
  cmd->add_option("--top-p", g.top_p, "1 = off")->capture_default_str();
  cmd->add_option("--seed", g.seed, "sampling seed")->capture_default_str();
  cmd->add_flag("--ignore-eos", g.ignore_eos, "do not stop at the model's end-of-sequence tokens");
  cmd->add_option("--prompts", g.prompts,
                  "offline batch mode: a JSONL file, one request per line ({\"prompt\": text} or "
                  "{\"prompt_ids\": [...]}, optional max_tokens, temperature, top_k, top_p, seed, "
                  "id); results come out one JSON line per request, in input order");
  cmd->add_option("--output", g.output, "write the --prompts results here instead of stdout");
}

void apply_kernel_flags(const EngineFlags& g) {
  set_cuda_programmatic_launch(!g.no_pdl);
  set_fp8_prefill(g.fp8_prefill);
}

BatchEngineOptions engine_options(const EngineFlags& g, int k, int64_t max_num_seqs) {
  TANDEM_CHECK(g.gpu_memory_utilization > 0 && g.gpu_memory_utilization <= 1,
               "--gpu-memory-utilization must be in (0, 1], got {}", g.gpu_memory_utilization);
  TANDEM_CHECK(g.kv_blocks >= 0, "--kv-blocks must be >= 0, got {}", g.kv_blocks);
  TANDEM_CHECK(g.prefix_cache_gb > 0 && g.prefix_cache_gb <= 1e6,
               "--prefix-cache-gb must be in (0, 1e6], got {}", g.prefix_cache_gb);
  return BatchEngineOptions{
      .num_speculative_tokens = k,
      // The oracle exists to force acceptance patterns: always k drafts.
      .control = g.speculative == "oracle" || k == 0 ? ControlMode::kFixed
                                                     : parse_control_mode(g.speculation_control),
      .cuda_graphs = !g.no_cuda_graphs,
      .max_num_seqs = max_num_seqs,
      .max_num_batched_tokens = g.step_rows(),
      .max_model_len = g.max_context,
      .kv_blocks = g.kv_blocks,
      .gpu_memory_utilization = g.gpu_memory_utilization,
      .prefix_cache_bytes =
          g.enable_prefix_caching ? static_cast<int64_t>(g.prefix_cache_gb * 1e9) : 0};
}

std::vector<int32_t> speculative_token_map(const EngineFlags& g) {
  if (g.speculative_token_map.empty()) return {};
  const nlohmann::ordered_json doc = read_json_file(g.speculative_token_map);
  TANDEM_CHECK(doc.is_array() && !doc.empty(),
               "--speculative-token-map {}: expected a non-empty JSON array of token ids",
               g.speculative_token_map);
  std::vector<int32_t> ids;
  for (const auto& v : doc) {
    TANDEM_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 &&
                     v.get<int64_t>() <= std::numeric_limits<int32_t>::max(),
                 "--speculative-token-map {}: {} is not a token id", g.speculative_token_map,
                 v.dump());
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

std::unique_ptr<Drafter> make_drafter(const EngineFlags& g, Qwen35Model& model) {
  TANDEM_CHECK(g.speculative_token_map.empty() || g.speculative == "mtp",
               "--speculative-token-map needs --speculative mtp (got --speculative {})",
               g.speculative);
  if (g.speculative == "none") return nullptr;
  TANDEM_CHECK(g.num_speculative_tokens >= 1 && g.num_speculative_tokens <= 8,
               "--num-speculative-tokens must be in [1, 8] with --speculative {}, got {}",
               g.speculative, g.num_speculative_tokens);
  if (g.speculative == "mtp") return std::make_unique<MtpDrafter>(model, speculative_token_map(g));
  if (g.speculative == "oracle") {
    return std::make_unique<OracleDrafter>(AcceptancePattern::parse(g.oracle_pattern),
                                           model.config().vocab_size);
  }
  fail("--speculative must be mtp, oracle or none, got '{}'", g.speculative);
}

namespace {
std::string render_chat_prompt(const tok::Tokenizer& t, const std::string& user_text) {
  const nlohmann::ordered_json messages =
      nlohmann::ordered_json::array({{{"role", "user"}, {"content", user_text}}});
  return tok::render_chat(t, messages, /*add_generation_prompt=*/true);
}
}  // namespace

std::unique_ptr<tok::Tokenizer> tokenizer_for(const GenerateOptions& g) {
  if (g.prompt.empty()) return nullptr;
  return std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_dir(g.model_dir));
}

GenerateRequest build_request(const GenerateOptions& g, const tok::Tokenizer* tokenizer) {
  GenerateRequest req;
  TANDEM_CHECK(g.prompt_ids.empty() != g.prompt.empty(),
               "give exactly one of --prompt-ids and --prompt");
  if (!g.prompt.empty()) {
    TANDEM_CHECK(tokenizer != nullptr, "--prompt needs the checkpoint's tokenizer");
    std::string text = g.prompt;
    if (g.chat) text = render_chat_prompt(*tokenizer, text);
    req.prompt = tokenizer->encode(text);
  } else {
    TANDEM_CHECK(!g.chat, "--chat applies to --prompt text");
    req.prompt = parse_ids(g.prompt_ids);
  }
  req.max_tokens = g.max_tokens;
  req.sampling = SamplingParams{
      .temperature = g.temperature, .top_k = g.top_k, .top_p = g.top_p, .seed = g.seed};
  check_sampling_params(req.sampling);
  TANDEM_CHECK(g.max_tokens >= 1, "--max-tokens must be >= 1, got {}", g.max_tokens);
  return req;
}

}  // namespace tandem::app
