// A batch of one through the engine.
#include "engine/generator.h"

#include <algorithm>

namespace tandem {

namespace {
BatchEngineOptions single(const Qwen35Model& model, const GeneratorOptions& o) {
  return BatchEngineOptions{.num_speculative_tokens = o.num_speculative_tokens,
                            .control = o.control,
                            .cuda_graphs = o.cuda_graphs,
                            .max_num_seqs = 1,
                            .max_num_batched_tokens = model.max_step_rows(),
                            .max_model_len = o.max_context,
                            .trace = o.trace};
}
}  // namespace

Generator::Generator(Qwen35Model& model, std::unique_ptr<Drafter> drafter, GeneratorOptions opt)
    : Generator(model, std::move(drafter), single(model, opt)) {}

Generator::Generator(Qwen35Model& model, std::unique_ptr<Drafter> drafter, BatchEngineOptions opt)
    : engine_(model, std::move(drafter), opt) {
  engine_.after_commit = [this](RequestId id, int64_t step, int64_t n_past) {
    if (id == current_ && after_commit) after_commit(step, n_past);
  };
  engine_.before_step = [this](const StepPlan&, std::span<const RequestId> ids) {
    if (before_step && std::find(ids.begin(), ids.end(), current_) != ids.end())
      before_step(engine_.cache(current_).n_past);  // the step's first position for the request
  };
}

GenerateResult Generator::generate(const GenerateRequest& req,
                                   const std::function<void(int32_t)>& on_token) {
  current_ = engine_.add(req);
  GenerateResult res;
  while (!engine_.idle()) {
    for (const RequestOutput& o : engine_.step()) {
      if (o.id != current_) continue;
      for (int32_t t : o.new_tokens) {
        res.tokens.push_back(t);
        if (on_token) on_token(t);
      }
      if (o.finished) res.finish_reason = o.finish_reason;
    }
  }
  res.stats = engine_.stats(current_);
  return res;
}

}  // namespace tandem
