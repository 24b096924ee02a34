// Options shared by the sub-commands (model, device, threads, prompt ids) and small helpers.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model_loader.h"

namespace tandem::tok {
class Tokenizer;
}  // namespace tandem::tok

namespace tandem::app {

struct CommonOptions {
  std::string model_dir;
  std::string device = "cpu";
  int threads = 0;                     // 0: all cores
  int64_t max_context = 4096;          // --max-model-len
  int64_t max_num_batched_tokens = 0;  // rows per step; 0: 512 on cpu, 2048 on cuda
  int64_t step_rows() const;           // max_num_batched_tokens resolved for the device
};

void add_common_options(CLI::App* cmd, CommonOptions& o);
int resolve_threads(int requested);                      // --threads: 0 means all cores
std::vector<int32_t> parse_ids(const std::string& csv);  // "1,2,3"; throws Error on bad input
// The JSON document in a file; throws Error naming the file when it cannot be read or parsed.
nlohmann::ordered_json read_json_file(const std::string& path);
// Each token id's text below vocab_size (special tokens and ids past the tokenizer's vocabulary
// empty): what JSON mode reads (BatchEngineOptions::token_bytes).
std::shared_ptr<const std::vector<std::string>> token_texts(const tok::Tokenizer& tokenizer,
                                                            int64_t vocab_size);
// `--fp8-prefill MODE` (tensor-cores | dequantize; the bench also decode-order) into the CUDA
// linear's process-wide switches; throws Error on another mode; a no-op without CUDA.
void set_fp8_prefill(const std::string& mode);
// Loads the model, printing progress for large checkpoints and the config summary on stderr.
std::unique_ptr<Qwen35Model> open_model(const CommonOptions& o, bool verbose);

}  // namespace tandem::app
