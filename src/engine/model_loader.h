// Opening a checkpoint directory as a runnable model: config, safetensors, weights on the chosen
// device, and the model object. Errors name the directory, file, tensor or field.
#pragma once

#include <memory>
#include <string>

#include "model/arch/qwen35.h"

namespace tandem {

struct EngineOptions {
  std::string model_dir;
  Device device = Device::kCpu;
  int n_threads = 1;
  int64_t max_step_rows = 256;  // rows one step may carry (--max-num-batched-tokens)
};

std::unique_ptr<Qwen35Model> load_model(const EngineOptions& opt,
                                        const LoadProgress& progress = {});

}  // namespace tandem
