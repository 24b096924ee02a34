// Options of `tandem generate` (and of anything else that generates): prompt, length, sampling,
// speculation. Kept apart from the command so that other commands can reuse them.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "apps/cli_common.h"
#include "engine/generator.h"
#include "tokenizer/tokenizer.h"

namespace tandem::app {

struct GenerateOptions : CommonOptions {
  std::string prompt_ids;
  std::string prompt;  // text, tokenized with the checkpoint's tokenizer.json
  bool chat = false;   // wrap --prompt as a user message with the model's chat template
  int max_tokens = 32;
  bool json = false;
  std::string speculative = "none";
  int num_speculative_tokens = 3;
  std::string oracle_pattern = "all";
  std::string speculation_control = "adaptive";
  std::string spec_trace;
  float temperature = 0.f;
  int top_k = 0;
  float top_p = 1.f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool no_cuda_graphs = false;
  bool no_pdl = false;  // cuda: no programmatic dependent launch (docs/cuda.md)
};

void add_generate_options(CLI::App* cmd, GenerateOptions& g);
// Builds the request; text prompts are tokenized with `tokenizer` (required when --prompt is set).
GenerateRequest build_request(const GenerateOptions& g, const tok::Tokenizer* tokenizer = nullptr);
// Loads the checkpoint's tokenizer when the options need text in or out, else null.
std::unique_ptr<tok::Tokenizer> tokenizer_for(const GenerateOptions& g);

}  // namespace tandem::app
