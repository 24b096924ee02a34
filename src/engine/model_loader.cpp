// load_model: config.json + safetensors -> Qwen35Model on the requested device.
#include "engine/model_loader.h"

#include "model/config.h"
#include "model/safetensors.h"

namespace tandem {

std::unique_ptr<Qwen35Model> load_model(const EngineOptions& opt, const LoadProgress& progress) {
  TANDEM_CHECK(opt.device == Device::kCpu || cuda_available(),
               "device 'cuda' requested but no CUDA device is available{}",
               cuda_available() ? "" : " (or tandem was built without -DTANDEM_CUDA=ON)");
  TANDEM_CHECK(opt.n_threads >= 1, "--threads must be >= 1, got {}", opt.n_threads);
  ModelConfig cfg = ModelConfig::from_dir(opt.model_dir);
  Checkpoint ck = Checkpoint::open(opt.model_dir);
  Qwen35Weights w = load_qwen35_weights(ck, cfg, opt.device, progress);
  ExecContext ctx{.device = opt.device, .n_threads = opt.n_threads};
  return std::make_unique<Qwen35Model>(std::move(cfg), std::move(w), ctx, opt.max_step_rows);
}

}  // namespace tandem
