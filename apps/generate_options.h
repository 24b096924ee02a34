// Options of `tandem generate` (and of anything else that generates): prompt, length, sampling,
// speculation. Kept apart from the command so that other commands can reuse them.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/cli_common.h"
#include "engine/batch_engine.h"
#include "engine/generator.h"
#include "tokenizer/tokenizer.h"

namespace tandem::app {

// What builds a BatchEngine: speculation and the pools (shared by `generate` and `serve`).
struct EngineFlags : CommonOptions {
  std::string speculative = "none";
  int num_speculative_tokens = 3;
  std::string oracle_pattern = "all";
  std::string speculation_control = "adaptive";
  std::string speculative_token_map;  // JSON array of the token ids an MTP draft may be
  bool no_cuda_graphs = false;
  bool no_pdl = false;  // cuda: no programmatic dependent launch (docs/cuda.md)
  std::string fp8_prefill = "tensor-cores";  // cuda, FP8 checkpoints: or "dequantize"
  int64_t max_num_seqs = 0;                  // 0: the command's default
  int64_t kv_blocks = 0;
  double gpu_memory_utilization = 0.9;
  bool enable_prefix_caching = false;  // engine/prefix_cache.h
  double prefix_cache_gb = 4.0;        // host memory for the kept prefixes
};

struct GenerateOptions : EngineFlags {
  std::string prompt_ids;
  std::string prompt;  // text, tokenized with the checkpoint's tokenizer.json
  bool chat = false;   // wrap --prompt as a user message with the model's chat template
  int max_tokens = 32;
  bool json = false;
  std::string spec_trace;
  float temperature = 0.f;
  int top_k = 0;
  float top_p = 1.f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  // The batched engine.
  std::string prompts;  // JSONL file of requests (offline batch mode)
  std::string output;   // JSONL results of --prompts (default: stdout)
};

// The process-wide kernel switches these flags set (PDL, the FP8 prefill path): before a model's
// graphs are captured.
void apply_kernel_flags(const EngineFlags& g);
// The engine options these flags describe, for k drafts per step (0: plain).
BatchEngineOptions engine_options(const EngineFlags& g, int k, int64_t max_num_seqs);
// The stats of one result as JSON (prefill/decode speed, acceptance, drafts).
nlohmann::json stats_json(const GenerateResult& r, int k);
// `tandem generate --prompts FILE.jsonl`: the offline batch mode.
void run_batch(const GenerateOptions& g);
// The drafter --speculative names (null for none; the oracle's references are set by the caller).
// The ids in --speculative-token-map's file (empty without one); throws Error on a bad file.
std::vector<int32_t> speculative_token_map(const EngineFlags& g);
std::unique_ptr<Drafter> make_drafter(const EngineFlags& g, Qwen35Model& model);

// --model, --device, ... (CommonOptions) and the engine's flags; max_num_seqs_help says what the
// command's default is. oracle: whether --speculative oracle and --oracle-pattern exist (tests).
void add_engine_flags(CLI::App* cmd, EngineFlags& g, const std::string& max_num_seqs_help,
                      bool oracle);
void add_generate_options(CLI::App* cmd, GenerateOptions& g);
// Builds the request; text prompts are tokenized with `tokenizer` (required when --prompt is set).
GenerateRequest build_request(const GenerateOptions& g, const tok::Tokenizer* tokenizer = nullptr);
// Loads the checkpoint's tokenizer when the options need text in or out, else null.
std::unique_ptr<tok::Tokenizer> tokenizer_for(const GenerateOptions& g);

}  // namespace tandem::app
