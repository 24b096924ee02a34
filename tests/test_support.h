// Helpers shared by the test folders: fixture locations, model loading, golden reading.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/state_pool.h"
#include "cache/step_buffers.h"
#include "engine/model_loader.h"

namespace tandem::testing {

inline std::string source_path(const std::string& rel) {
  return std::string(TANDEM_SOURCE_DIR) + "/" + rel;
}
// The shipped trained model lives in models/, its goldens under tests/fixtures/models/.
inline const std::string kTrainedModel = "tandem-tiny-qwen35";

inline std::string fixture_dir(const std::string& name) {
  return name == kTrainedModel ? source_path("models/" + name)
                               : source_path("tests/fixtures/models/" + name);
}
inline std::string golden_dir(const std::string& name) {
  return name == kTrainedModel ? source_path("tests/fixtures/models/" + name + "-golden")
                               : fixture_dir(name) + "/golden";
}
// Random-weight fixtures (tools/goldens/make_fixtures.py).
inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names{"tiny-text", "tiny-vl", "small"};
  return names;
}
// Every model with HF goldens: the fixtures and the trained model.
inline const std::vector<std::string>& golden_model_names() {
  static const std::vector<std::string> names{"tiny-text", "tiny-vl", "small", kTrainedModel};
  return names;
}

// A model directory on the CPU, one thread: ctest runs tests in parallel, one thread each avoids
// oversubscription.
inline std::unique_ptr<Qwen35Model> load_model_dir(const std::string& dir, int64_t max_step = 256) {
  EngineOptions o;
  o.model_dir = dir;
  o.n_threads = 1;
  o.max_step_rows = max_step;
  return load_model(o);
}

inline std::unique_ptr<Qwen35Model> load_fixture(const std::string& name, int64_t max_step = 256) {
  return load_model_dir(fixture_dir(name), max_step);
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Writes host tensors as a safetensors file, in the given order (the float dtypes the loader
// reads: F32, BF16, F16, F8_E4M3).
inline void write_safetensors(const std::string& path,
                              const std::vector<std::pair<std::string, Tensor>>& tensors) {
  auto name = [](DType d) {
    switch (d) {
      case DType::kF32:
        return "F32";
      case DType::kBF16:
        return "BF16";
      case DType::kF16:
        return "F16";
      case DType::kF8E4M3:
        return "F8_E4M3";
      default:
        throw std::runtime_error("write_safetensors: no safetensors name for this dtype");
    }
  };
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const auto& [n, t] : tensors) {
    header[n] = {{"dtype", name(t.dtype())},
                 {"shape", t.shape()},
                 {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  const std::string h = header.dump();
  const uint64_t len = h.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [n, t] : tensors) {
    const Tensor c = t.is_contiguous() ? t : t.to(Device::kCpu);
    out.write(static_cast<const char*>(c.raw()), c.nbytes());
  }
}

inline nlohmann::json goldens(const std::string& name) {
  return read_json(golden_dir(name) + "/goldens.json");
}

// One sequence driven step by step through the model, without the engine: a pool with one slot,
// its step buffers and its cache handle. step() runs rows at positions [n_past, n_past + n).
class Solo {
 public:
  explicit Solo(Qwen35Model& m, int64_t max_len = 512, int64_t step_rows = 4)
      : model_(m),
        pool_(m.config(), config(m, max_len, step_rows), m.context(), m.act_dtype(), step_rows),
        buffers_(m.max_step_rows(), 1, pool_.config().table_width(), 64, pool_.scratch_block(),
                 pool_.scratch_slot(), m.context().device) {
    TANDEM_CHECK(pool_.acquire(seq_) && pool_.reserve(seq_, max_len), "Solo: pool too small");
  }
  // Runs the rows (decode: the verify family; else a prefill chunk) and returns the logits of
  // every row (f32 [n, vocab], host). Commit afterwards with seq().commit_*.
  Tensor step(std::span<const int32_t> tokens, bool decode) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const PlannedSeq q{.cache = &seq_,
                       .tokens = tokens,
                       .rows = n,
                       .start = seq_.n_past,
                       .decode = decode,
                       .logits = LogitRows::kAll};
    last_ = buffers_.plan(std::span<const PlannedSeq>(&q, 1));
    Tensor logits =
        Tensor::zeros({n, model_.config().vocab_size}, DType::kF32, model_.context().device);
    model_.forward(last_.batch, pool_.views(), logits);
    return logits.host();
  }
  // The MTP block over pairs (hidden_in row j, tokens[j]) at positions start + j.
  Tensor mtp(std::span<const int32_t> tokens, int64_t start, const Tensor& hidden_in,
             const Tensor& hidden_out) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const PlannedSeq q{.cache = &seq_,
                       .tokens = tokens,
                       .rows = n,
                       .start = start,
                       .decode = n <= pool_.config().step_rows,
                       .logits = LogitRows::kAll};
    last_ = buffers_.plan(std::span<const PlannedSeq>(&q, 1));
    Tensor logits =
        Tensor::zeros({n, model_.config().vocab_size}, DType::kF32, model_.context().device);
    model_.mtp_forward(last_.batch, pool_.views(), hidden_in, hidden_out, logits);
    return logits.host();
  }
  SequenceCache& seq() { return seq_; }
  StatePool& pool() { return pool_; }

 private:
  static CacheConfig config(const Qwen35Model& m, int64_t max_len, int64_t step_rows) {
    CacheConfig c{.block_size = 64,
                  .num_slots = 1,
                  .step_rows = step_rows,
                  .max_model_len = max_len,
                  .with_mtp = m.has_mtp()};
    c.num_blocks = c.max_blocks_per_seq() + 1;
    return c;
  }
  Qwen35Model& model_;
  StatePool pool_;
  StepBuffers buffers_;
  SequenceCache seq_;
  StepPlan last_;
};

// Test-name suffix for a model-parameterised suite ("tiny-text" -> "tiny_text").
inline std::string model_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

// The tandem binary (TANDEM_BINARY) run with args: its exit code and stdout + stderr.
struct RunResult {
  int exit_code;
  std::string output;
};
inline RunResult run_tandem(const std::string& args) {
  const std::string cmd = std::string(TANDEM_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace tandem::testing
