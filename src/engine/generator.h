// One request at a time through the batched engine (a batch of one): the `tandem generate`
// single-prompt path, `score`, and the tests that follow one sequence step by step. Everything
// runs through BatchEngine, so a single request and a batch share one code path.
#pragma once

#include <functional>
#include <memory>
#include <ostream>

#include "engine/batch_engine.h"

namespace tandem {

using GenerateRequest = Request;

struct GeneratorOptions {
  int num_speculative_tokens = 0;             // k (0: plain decoding); the most drafts per step
  ControlMode control = ControlMode::kFixed;  // kAdaptive: choose 0..k per step (never slower)
  int64_t max_context = 4096;                 // the model length of the sequence
  std::ostream* trace = nullptr;              // JSONL, one line per step
  bool cuda_graphs = true;                    // on CUDA, replay captured verify steps
};

class Generator {
 public:
  // drafter may be null when num_speculative_tokens == 0.
  Generator(Qwen35Model& model, std::unique_ptr<Drafter> drafter, GeneratorOptions opt);
  // With the engine's own options (the command line's pools and limits).
  Generator(Qwen35Model& model, std::unique_ptr<Drafter> drafter, BatchEngineOptions opt);

  // on_token is called with each emitted token in order (streaming).
  GenerateResult generate(const GenerateRequest& req,
                          const std::function<void(int32_t)>& on_token = {});
  // Teacher-forced logits of every prompt position (f32 [n, vocab], host).
  Tensor score(const std::vector<int32_t>& ids) { return engine_.score(ids); }

  BatchEngine& engine() { return engine_; }
  bool uses_cuda_graphs() const { return engine_.uses_cuda_graphs(); }
  Drafter* drafter() { return engine_.drafter(); }
  // The request of the current generate() call (ids count up from 0).
  RequestId current() const { return current_; }
  // Called after every commit with (step, n_past) (step -1: the prompt's last chunk); tests and
  // the divergence finder inspect the committed state there (engine().cache(current())).
  // before_step gets the start position of each target step.
  std::function<void(int64_t, int64_t)> after_commit;
  std::function<void(int64_t)> before_step;

 private:
  BatchEngine engine_;
  RequestId current_ = -1;
};

}  // namespace tandem
