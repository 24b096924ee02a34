// Qwen3.5 dense: the target forward over a batched step (decode/verify rows and prefill chunks of
// many sequences) and the MTP block, written once against the kernel interfaces so that the same
// code runs on every device. It reads the step and the cache through model/step.h.
// Not here: sampling, acceptance and commit (src/spec), pools (src/cache), requests (src/engine).
#pragma once

#include <memory>

#include "core/exec_context.h"
#include "model/activation_observer.h"
#include "model/arch/qwen35_weights.h"
#include "model/config.h"
#include "model/step.h"

namespace tandem {

struct ForwardScratch;
namespace kernels {
struct LinearArgs;
}

class Qwen35Model {
 public:
  // max_step_rows: the most rows one step may carry (activation scratch is sized for it).
  Qwen35Model(ModelConfig cfg, Qwen35Weights weights, const ExecContext& ctx,
              int64_t max_step_rows);
  ~Qwen35Model();

  const ModelConfig& config() const { return cfg_; }
  const Qwen35Weights& weights() const { return w_; }
  const ExecContext& context() const { return ctx_; }
  DType act_dtype() const { return act_; }
  bool has_mtp() const { return w_.mtp.has_value(); }
  int64_t max_step_rows() const;
  void set_observer(ActivationObserver* obs) { obs_ = obs; }
  bool has_observer() const { return obs_ != nullptr; }

  // Target forward over the step's rows. Afterwards hidden(n_rows) holds the post-final-norm
  // hidden rows; the logits of the step's logit rows are written to `logits` (f32
  // [n_logit_rows, vocab]) when it is defined.
  void forward(const StepBatch& step, const CacheViews& cache, const Tensor& logits);
  Tensor hidden(int64_t n_rows) const;

  // MTP block over the step's rows, pairs (h_t, x_{t+1}) at position t: token x_{t+1} in the
  // step's token ids, hidden_in rows h_t (post-final-norm target hidden, or the MTP's own output
  // when chaining), the MTP layer's KV in cache.mtp. Writes the post-mtp.norm hidden to hidden_out
  // [n_rows, hidden] and the logits of the step's logit rows to `logits`: through `head` when
  // given (a draft vocabulary's rows of lm_head, MtpDrafter), else lm_head.
  void mtp_forward(const StepBatch& step, const CacheViews& cache, const Tensor& hidden_in,
                   const Tensor& hidden_out, const Tensor& logits,
                   const LinearWeight* head = nullptr);

 private:
  void decoder_layer(const DecoderLayerWeights& w, int64_t layer, const StepBatch& b,
                     const LayerCacheView& cache, const Tensor& workspace, bool pending_add);
  void gdn_mixer(const DecoderLayerWeights& w, int64_t layer, const StepBatch& b,
                 const LayerCacheView& cache);
  void attention_mixer(const DecoderLayerWeights& w, int64_t layer, const StepBatch& b,
                       const LayerCacheView& cache, const Tensor& workspace);
  void mlp(const MlpWeights& w, int64_t layer, const StepBatch& b);
  // The last norm of a stack of blocks (final_norm, mtp.norm) into out.
  void final_norm(const Tensor& weight, const Tensor& out, int64_t n);
  // head (lm_head) over the step's logit rows of `hidden` (gathered into scratch unless all rows).
  void logits_of(const StepBatch& b, const Tensor& hidden, const Tensor& logits,
                 const LinearWeight& head);
  // A projection of a block's norm(residual) into out: the residual scaled by the linear itself
  // when the norms are folded into the weights, else the rows the separate norm wrote.
  kernels::LinearArgs from_norm(const LinearWeight& weight, const Tensor& out,
                                const StepBatch& b) const;
  // from_norm for every part of a stacked projection, each into its own columns of out.
  void project(const StackedWeight& weight, const Tensor& out, const StepBatch& b);
  // A mixer's or the MLP's output projection, whose output joins the residual stream: added by
  // the linear when the norms are folded, else left in the scratch for the next norm to add.
  kernels::LinearArgs to_residual(const Tensor& x, const LinearWeight& weight,
                                  const StepBatch& b) const;
  void observe(std::string_view name, int64_t layer, const Tensor& t) {
    if (obs_) obs_->observe(name, layer, t);
  }

  ModelConfig cfg_;
  Qwen35Weights w_;
  ExecContext ctx_;
  DType act_;
  std::unique_ptr<ForwardScratch> s_;
  ActivationObserver* obs_ = nullptr;
  bool owns_stream_ = false;
};

}  // namespace tandem
