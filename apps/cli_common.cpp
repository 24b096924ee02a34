// Shared command-line plumbing.
#include "apps/cli_common.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "kernels/linear/linear.h"
#include "tokenizer/tokenizer.h"

namespace tandem::app {

void add_common_options(CLI::App* cmd, CommonOptions& o) {
  cmd->add_option("--model", o.model_dir,
                  "Hugging Face checkpoint directory (config.json + safetensors)")
      ->required();
  cmd->add_option("--device", o.device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads (default: all cores)");
  cmd->add_option("--max-model-len,--max-context", o.max_context,
                  "positions one sequence may reach (prompt + generated)")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
                  "rows one step may carry: decode rows plus prefill chunks (default 512 on cpu, "
                  "2048 on cuda)");
}

int64_t CommonOptions::step_rows() const {
  if (max_num_batched_tokens > 0) return max_num_batched_tokens;
  return device == "cuda" ? 2048 : 512;
}

int resolve_threads(int requested) {
  return requested > 0 ? requested
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

nlohmann::ordered_json read_json_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TANDEM_CHECK(f.good(), "cannot read {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return nlohmann::ordered_json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON: {}", path, e.what());
  }
}

std::shared_ptr<const std::vector<std::string>> token_texts(const tok::Tokenizer& tokenizer,
                                                            int64_t vocab_size) {
  auto texts = std::make_shared<std::vector<std::string>>();
  texts->reserve(static_cast<size_t>(vocab_size));
  for (int64_t t = 0; t < vocab_size; ++t) {
    texts->emplace_back(t < tokenizer.vocab_size()
                            ? tokenizer.token_bytes(static_cast<int32_t>(t), /*skip_special=*/true)
                            : std::string_view());
  }
  return texts;
}

std::vector<int32_t> parse_ids(const std::string& csv) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t comma = csv.find(',', pos);
    if (comma == std::string::npos) comma = csv.size();
    const std::string item = csv.substr(pos, comma - pos);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TANDEM_CHECK(used == item.size() && !item.empty() && v >= 0 && v <= INT32_MAX,
                 "--prompt-ids: '{}' is not a non-negative token id", item);
    ids.push_back(static_cast<int32_t>(v));
    pos = comma + 1;
  }
  TANDEM_CHECK(!ids.empty(), "--prompt-ids is empty");
  return ids;
}

void set_fp8_prefill(const std::string& mode) {
  TANDEM_CHECK(mode == "tensor-cores" || mode == "dequantize" || mode == "decode-order",
               "--fp8-prefill must be tensor-cores, dequantize or decode-order, got '{}'", mode);
#ifdef TANDEM_CUDA
  kernels::linear_fp8_set_prefill_tensor_cores(mode == "tensor-cores");
  kernels::linear_fp8_set_prefill_decode_order(mode == "decode-order");
#endif
}

std::unique_ptr<Qwen35Model> open_model(const CommonOptions& o, bool verbose) {
  EngineOptions opt;
  opt.model_dir = o.model_dir;
  opt.device = parse_device(o.device);
  opt.n_threads = resolve_threads(o.threads);
  opt.max_step_rows = o.step_rows();
  TANDEM_CHECK(opt.max_step_rows >= 64 && opt.max_step_rows % 64 == 0,
               "--max-num-batched-tokens must be a positive multiple of 64, got {}",
               opt.max_step_rows);
  int last_pct = -1;
  auto progress = [&](size_t done, size_t total) {
    if (!verbose || total < (256u << 20)) return;  // only large checkpoints show progress
    const int pct =
        static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total));
    if (pct / 10 != last_pct / 10) std::fprintf(stderr, "loading weights: %d%%\n", pct);
    last_pct = pct;
  };
  auto model = load_model(opt, progress);
  if (verbose) {
    std::fprintf(stderr, "%s\ndevice: %s, threads: %d, max model len: %lld, step rows: %lld\n",
                 model->config().summary().c_str(), o.device.c_str(), opt.n_threads,
                 static_cast<long long>(o.max_context), static_cast<long long>(opt.max_step_rows));
  }
  return model;
}

}  // namespace tandem::app
