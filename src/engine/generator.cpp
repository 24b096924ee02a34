// The generation loop: prefill in chunks, then draft -> verify -> accept -> commit n_acc ->
// drafter first pass, with a plain step being the same path with zero drafts.
#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "kernels/argmax/argmax.h"
#include "spec/acceptance.h"

namespace tandem {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Generator::Generator(Qwen35Model& model, std::unique_ptr<Drafter> drafter, GeneratorOptions opt)
    : model_(model), drafter_(std::move(drafter)), opt_(opt) {
  const int k = opt.num_speculative_tokens;
  TANDEM_CHECK(k >= 0 && k <= 8, "--num-speculative-tokens must be in [0, 8], got {}", k);
  TANDEM_CHECK(k == 0 || drafter_ != nullptr, "speculative decoding with k={} needs a drafter", k);
  TANDEM_CHECK(opt.max_context >= 2, "--max-context must be at least 2, got {}", opt.max_context);
  StateConfig sc{.max_context = opt.max_context,
                 .k_max = k,
                 .block_size = 64,
                 .max_step_tokens = model.max_step_tokens()};
  state_ = std::make_unique<SequenceState>(model.config(), sc, model.context().device,
                                           model.act_dtype(), model.has_mtp());
  logits_ = Tensor::zeros({k + 1, model.config().vocab_size}, DType::kF32, model.context().device);
  argmax_ids_ = Tensor::zeros({k + 1}, DType::kI32, model.context().device);
  // Not while an observer listens: it copies activations to the host, which a capture forbids.
  if (opt.cuda_graphs && model.context().device == Device::kCuda && !model.has_observer()) {
    // Captured before any prefill, so the first decode steps do not stall on capture. Capture
    // records launches only; the step metadata is written into the same buffers before each replay.
    void* stream = model.context().cuda_stream;
    for (int64_t n = 1; n <= k + 1; ++n) {
      auto g = std::make_unique<CudaGraph>();
      g->begin_capture(stream);
      model.forward(*state_, n, StepKind::kVerify, 0, logits_.slice(0, 0, n), 0);
      kernels::argmax({logits_.slice(0, 0, n), argmax_ids_.slice(0, 0, n)}, model.context());
      g->end_capture(stream);
      graphs_.push_back(std::move(g));
    }
  }
  // The drafter may capture its own forwards over this state's buffers (MtpDrafter on CUDA).
  if (drafter_) drafter_->prepare(*state_, k, opt.cuda_graphs);
}

void Generator::verify_step(int64_t n, int64_t start, bool greedy) {
  if (!graphs_.empty() && !model_.has_observer()) {
    graphs_[n - 1]->launch(model_.context().cuda_stream);  // forward and argmax
    return;
  }
  model_.forward(*state_, n, StepKind::kVerify, start, logits_.slice(0, 0, n), 0);
  if (greedy)
    kernels::argmax({logits_.slice(0, 0, n), argmax_ids_.slice(0, 0, n)}, model_.context());
}

std::vector<int32_t> Generator::read_argmax(int64_t n) const {
  const Tensor ids = argmax_ids_.slice(0, 0, n).host();
  return std::vector<int32_t>(ids.data<const int32_t>(), ids.data<const int32_t>() + n);
}

std::vector<int32_t> Generator::argmax_rows(int64_t n) {
  kernels::argmax({logits_.slice(0, 0, n), argmax_ids_.slice(0, 0, n)}, model_.context());
  return read_argmax(n);
}

Generator::~Generator() = default;

int32_t Generator::prefill(const std::vector<int32_t>& prompt, const SamplingParams& p,
                           Tensor* all_logits) {
  SequenceState& st = *state_;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t vocab = model_.config().vocab_size;
  TANDEM_CHECK(n_prompt >= 1, "the prompt is empty");
  for (int32_t id : prompt)
    TANDEM_CHECK(id >= 0 && id < vocab, "prompt token id {} is outside the vocabulary [0, {})", id,
                 vocab);
  TANDEM_CHECK(n_prompt + 1 <= opt_.max_context,
               "the prompt has {} tokens but the context holds {} (raise --max-context)", n_prompt,
               opt_.max_context);
  st.reset();
  if (drafter_) drafter_->begin_sequence();
  const int64_t chunk = model_.max_step_tokens();
  Tensor chunk_logits;
  if (all_logits)
    chunk_logits = Tensor::zeros({chunk, vocab}, DType::kF32, model_.context().device);
  int32_t first = -1;
  for (int64_t s = 0; s < n_prompt; s += chunk) {
    const int64_t n = std::min(chunk, n_prompt - s);
    const bool last_chunk = s + n == n_prompt;
    st.target.plan(prompt.data() + s, n, s, opt_.max_context);
    if (before_step) before_step(s);
    if (all_logits) {
      model_.forward(st, n, StepKind::kPrefill, s, chunk_logits.slice(0, 0, n), 0);
      Tensor host = chunk_logits.slice(0, 0, n).host();
      all_logits->slice(0, s, s + n).copy_from(host);
    } else {
      model_.forward(st, n, StepKind::kPrefill, s, last_chunk ? logits_.slice(0, 0, 1) : Tensor(),
                     n - 1);
    }
    st.set_n_acc(1);  // the prefill state sits in column 0 / conv offset 0
    if (last_chunk) {
      if (p.greedy() && !all_logits) {
        first = argmax_rows(1)[0];
      } else {
        Tensor row = all_logits ? all_logits->slice(0, n_prompt - 1, n_prompt)
                                : logits_.slice(0, 0, 1).host();
        first = p.greedy() ? kernels::ref::argmax_row(row.data<float>(), vocab)
                           : draw(target_distribution(row.data<float>(), vocab, p), rng_);
      }
    }
    if (drafter_) {
      std::vector<int32_t> next(prompt.begin() + s + 1, prompt.begin() + s + n);
      next.push_back(last_chunk ? first : prompt[s + n]);
      drafter_->after_target_step(st, next, s);
    }
  }
  st.n_past = n_prompt;
  return first;
}

Tensor Generator::score(const std::vector<int32_t>& ids) {
  Tensor out =
      Tensor::zeros({static_cast<int64_t>(ids.size()), model_.config().vocab_size}, DType::kF32);
  TANDEM_CHECK(!ids.empty(), "the prompt is empty");
  prefill(ids, SamplingParams{}, &out);
  return out;
}

GenerateResult Generator::generate(const GenerateRequest& req,
                                   const std::function<void(int32_t)>& on_token) {
  check_sampling_params(req.sampling);
  TANDEM_CHECK(req.max_tokens >= 1, "max_tokens must be >= 1, got {}", req.max_tokens);
  rng_.seed(req.sampling.seed);
  SequenceState& st = *state_;
  const int k = opt_.num_speculative_tokens;
  GenerateResult res;
  GenerationStats& stats = res.stats;
  stats.prompt_tokens = static_cast<int64_t>(req.prompt.size());
  stats.accepted_per_position.assign(k, 0);
  const double t0 = now_seconds();
  int32_t last = prefill(req.prompt, req.sampling, nullptr);
  const double t1 = now_seconds();
  stats.prefill_seconds = t1 - t0;

  auto emit = [&](int32_t tok) {  // returns true when generation must stop
    res.tokens.push_back(tok);
    if (on_token) on_token(tok);
    if (std::find(req.stop_ids.begin(), req.stop_ids.end(), tok) != req.stop_ids.end()) {
      res.finish_reason = "stop";
      return true;
    }
    if (static_cast<int>(res.tokens.size()) >= req.max_tokens) {
      res.finish_reason = "length";
      return true;
    }
    return false;
  };
  bool done = emit(last);
  SpeculationControl control(k, opt_.control);
  if (drafter_) drafter_->catch_up(st);  // the prompt's first pass is not a step's cost
  int prev_k = -1;
  while (!done) {
    const double step_t0 = now_seconds();
    const int64_t room = opt_.max_context - st.n_past - 1;  // positions left after `last`
    if (room < 0) {
      res.finish_reason = "length";
      break;
    }
    const int k_eff = static_cast<int>(std::min<int64_t>(control.choose(), room));
    std::vector<int32_t> drafts;
    double catch_up_seconds = 0.0;  // the first pass over rows of earlier k = 0 steps
    if (k_eff > 0) {
      if (prev_k == 0) {
        const double c0 = now_seconds();
        drafter_->catch_up(st, /*keep_rows=*/1);  // the last step's row: this step's own pass
        catch_up_seconds = now_seconds() - c0;
      }
      drafts = drafter_->propose(st, k_eff, res.tokens);
    }
    prev_k = k_eff;
    std::vector<int32_t> step_tokens{last};
    step_tokens.insert(step_tokens.end(), drafts.begin(), drafts.end());
    const int64_t n = static_cast<int64_t>(step_tokens.size()), start = st.n_past;
    st.target.plan(step_tokens.data(), n, start, opt_.max_context);
    if (before_step) before_step(start);
    const bool greedy = req.sampling.greedy();
    verify_step(n, start, greedy);
    const Verdict v = greedy ? accept_greedy(read_argmax(n), drafts)
                             : accept(logits_.slice(0, 0, n).host(), drafts, req.sampling, rng_);
    st.set_n_acc(v.n_acc);  // the commit: one integer
    st.n_past += v.n_acc;
    if (after_commit) after_commit(stats.steps, st.n_past);
    ++stats.steps;
    if (!drafts.empty()) {
      ++stats.drafting_steps;
      stats.draft_tokens += static_cast<int64_t>(drafts.size());
      stats.accepted_tokens += v.n_acc - 1;
      for (int i = 0; i < v.n_acc - 1; ++i) ++stats.accepted_per_position[i];
    }
    if (drafter_) {
      std::vector<int32_t> next(drafts.begin(), drafts.begin() + (v.n_acc - 1));
      next.push_back(v.emitted.back());
      drafter_->after_target_step(st, next, start);
    }
    const double step_seconds = now_seconds() - step_t0;
    control.record(k_eff, v.n_acc, step_seconds, catch_up_seconds);
    if (opt_.trace) {
      *opt_.trace << nlohmann::json{{"step", stats.steps - 1}, {"position", start - 1},
                                    {"drafts", drafts},        {"target", v.target_tokens},
                                    {"n_acc", v.n_acc},        {"seconds", step_seconds}}
                         .dump()
                  << "\n";
    }
    for (int32_t tok : v.emitted) {
      if ((done = emit(tok))) break;
    }
    last = v.emitted.back();
  }
  stats.steps_per_k = control.steps_per_k();
  stats.generated_tokens = static_cast<int64_t>(res.tokens.size());
  stats.decode_seconds = now_seconds() - t1;
  return res;
}

}  // namespace tandem
