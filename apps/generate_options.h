// Options of `tandem generate` (and of anything else that generates): prompt, length, sampling,
// speculation. Kept apart from the command so that other commands can reuse them.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "apps/cli_common.h"
#include "engine/generator.h"

namespace tandem::app {

struct GenerateOptions : CommonOptions {
  std::string prompt_ids;
  int max_tokens = 32;
  bool json = false;
  std::string speculative = "none";
  int num_speculative_tokens = 3;
  std::string oracle_pattern = "all";
  std::string spec_trace;
  float temperature = 0.f;
  int top_k = 0;
  float top_p = 1.f;
  uint64_t seed = 0;
  bool ignore_eos = false;
};

void add_generate_options(CLI::App* cmd, GenerateOptions& g);
GenerateRequest build_request(const GenerateOptions& g);

}  // namespace tandem::app
