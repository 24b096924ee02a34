// Generation for one sequence: chunked prefill, then steps of (draft, verify, accept, commit).
// A plain decode step is a verify with zero drafts, so speculation and plain decoding share one
// path (DESIGN.md section 3). Stats and the per-step JSONL trace are kept here.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <vector>

#include "core/cuda_graph.h"
#include "model/arch/qwen35.h"
#include "spec/drafter.h"
#include "spec/sampler.h"
#include "spec/speculation_control.h"

namespace tandem {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
};

struct GenerationStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t steps = 0, drafting_steps = 0, draft_tokens = 0, accepted_tokens = 0;
  std::vector<int64_t> accepted_per_position;  // [k]
  std::vector<int64_t> steps_per_k;            // [k + 1]: steps that drafted 0..k tokens
  double mean_acceptance_length() const {
    return drafting_steps ? 1.0 + static_cast<double>(accepted_tokens) / drafting_steps : 1.0;
  }
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  GenerationStats stats;
  std::string finish_reason;  // "stop" | "length"
};

struct GeneratorOptions {
  int num_speculative_tokens = 0;             // k (0: plain decoding); the most drafts per step
  ControlMode control = ControlMode::kFixed;  // kAdaptive: choose 0..k per step (never slower)
  int64_t max_context = 4096;
  std::ostream* trace = nullptr;  // JSONL, one line per step
  bool cuda_graphs = true;        // on CUDA, replay captured verify steps (one graph per 1..k+1)
};

class Generator {
 public:
  // drafter may be null when num_speculative_tokens == 0.
  Generator(Qwen35Model& model, std::unique_ptr<Drafter> drafter, GeneratorOptions opt);
  ~Generator();

  // on_token is called with each emitted token in order (streaming).
  GenerateResult generate(const GenerateRequest& req,
                          const std::function<void(int32_t)>& on_token = {});
  // Teacher-forced logits of every prompt position (f32 [n, vocab], host).
  Tensor score(const std::vector<int32_t>& ids);

  SequenceState& state() { return *state_; }
  bool uses_cuda_graphs() const { return !graphs_.empty(); }
  Drafter* drafter() { return drafter_.get(); }
  // Called after every commit with (step, n_past); tests and the divergence finder inspect the
  // committed state there. before_step gets the start position of each target step.
  std::function<void(int64_t, int64_t)> after_commit;
  std::function<void(int64_t)> before_step;

 private:
  int32_t prefill(const std::vector<int32_t>& prompt, const SamplingParams& p, Tensor* all_logits);

  Qwen35Model& model_;
  std::unique_ptr<Drafter> drafter_;
  GeneratorOptions opt_;
  std::unique_ptr<SequenceState> state_;
  // Runs the verify forward of n tokens already planned in the state: a captured graph on CUDA
  // (invariant 5: the step reads only fixed buffers), eager otherwise or while an observer listens.
  // With `greedy` the argmax of every row lands in argmax_ids_ (the graphs always include it).
  void verify_step(int64_t n, int64_t start, bool greedy);
  // The argmax of the first n rows of logits_, computed on the model's device: only n ids cross
  // to the host, not n rows of logits.
  std::vector<int32_t> argmax_rows(int64_t n);
  std::vector<int32_t> read_argmax(int64_t n) const;

  Tensor logits_;      // f32 [max(k+1, 1), vocab] on the model's device
  Tensor argmax_ids_;  // i32 [max(k+1, 1)] on the model's device
  std::vector<std::unique_ptr<CudaGraph>> graphs_;  // [n - 1]: verify steps of n tokens
  std::mt19937_64 rng_;
};

}  // namespace tandem
