// The divergence finder: runs a prompt without and with speculation and names the first step,
// layer and state (conv window, SSM column, KV position, named activation such as hidden) whose
// bits differ, with both values. Activation rows of a verify step are compared only for the
// accepted rows, against the plain run's row at the same position.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/generator.h"

namespace tandem {

struct DivergenceReport {
  bool identical = true;
  int64_t step = -1;      // speculative step (0-based) at which the difference was seen
  int64_t position = -1;  // sequence position of the differing row or state
  int64_t layer = -1;     // model layer (-1: model-level tensor)
  std::string state;      // "ssm column 2", "conv window", "kv k", "activation hidden", ...
  int64_t index = -1;     // flat index of the first differing element
  float plain = 0, spec = 0;
  std::string describe() const;
};

struct DivergenceOptions {
  std::vector<int32_t> prompt;
  int max_tokens = 64;
  int num_speculative_tokens = 3;
  int64_t max_context = 4096;
  // Test-only: called in the speculative run after each commit, before the comparison, so a test
  // can corrupt state on purpose and check that it is named.
  std::function<void(Generator&, int64_t step)> after_commit_hook;
};

DivergenceReport find_divergence(Qwen35Model& model,
                                 const std::function<std::unique_ptr<Drafter>()>& make_drafter,
                                 const DivergenceOptions& opt);

}  // namespace tandem
