// Qwen3.5 dense: the target forward (prefill chunks and decode/verify steps) and the MTP block,
// written once against the kernel interfaces so that the same code runs on every device.
// Not here: sampling, acceptance and commit (src/spec), request handling (src/engine).
#pragma once

#include <memory>

#include "cache/sequence_state.h"
#include "core/exec_context.h"
#include "model/activation_observer.h"
#include "model/arch/qwen35_weights.h"
#include "model/config.h"

namespace tandem {

enum class StepKind {
  kPrefill,  // chunked GDN, compact conv history; the state lands in column 0 (next n_acc = 1)
  kVerify,   // recurrent GDN, one state column per query token (a plain decode is 1 token)
};

struct ForwardScratch;
namespace kernels {
struct LinearArgs;
}

class Qwen35Model {
 public:
  Qwen35Model(ModelConfig cfg, Qwen35Weights weights, const ExecContext& ctx,
              int64_t max_step_tokens);
  ~Qwen35Model();

  const ModelConfig& config() const { return cfg_; }
  const Qwen35Weights& weights() const { return w_; }
  const ExecContext& context() const { return ctx_; }
  DType act_dtype() const { return act_; }
  bool has_mtp() const { return w_.mtp.has_value(); }
  int64_t max_step_tokens() const;
  void set_observer(ActivationObserver* obs) { obs_ = obs; }
  bool has_observer() const { return obs_ != nullptr; }

  // Target forward over n tokens already planned in st.target (positions start .. start+n-1).
  // Afterwards hidden(n) holds the post-final-norm hidden rows; the logits of rows
  // [logits_from, n) are written to `logits` (f32 [n - logits_from, vocab]) when it is defined.
  void forward(SequenceState& st, int64_t n, StepKind kind, int64_t start, const Tensor& logits,
               int64_t logits_from);
  Tensor hidden(int64_t n) const;

  // MTP block over n pairs planned in st.mtp (token x_{t+1} at position t) with hidden_in rows h_t
  // (post-final-norm target hidden, or the MTP's own output when chaining). Writes the
  // post-mtp.norm hidden to hidden_out [n, hidden] and the logits of rows [logits_from, n) to
  // `logits` (f32 [n - logits_from, vocab]).
  void mtp_forward(SequenceState& st, int64_t n, const Tensor& hidden_in, const Tensor& hidden_out,
                   const Tensor& logits, int64_t logits_from);

 private:
  void decoder_layer(const DecoderLayerWeights& w, int64_t layer, SequenceState& st,
                     const KvLayerCache* kv, const StepMeta& meta, int64_t n, StepKind kind,
                     int64_t start, bool pending_add);
  void gdn_mixer(const DecoderLayerWeights& w, int64_t layer, SequenceState& st, int64_t n,
                 StepKind kind, int64_t start);
  void attention_mixer(const DecoderLayerWeights& w, int64_t layer, const KvLayerCache& kv,
                       SequenceState& st, const StepMeta& meta, int64_t n);
  void mlp(const MlpWeights& w, int64_t layer, int64_t n);
  // The last norm of a stack of blocks (final_norm, mtp.norm) into out.
  void final_norm(const Tensor& weight, const Tensor& out, int64_t n);
  // A projection of a block's norm(residual) into out: the residual scaled by the linear itself
  // when the norms are folded into the weights, else the rows the separate norm wrote.
  kernels::LinearArgs from_norm(const Tensor& weight, const Tensor& out, int64_t n) const;
  // A mixer's or the MLP's output projection, whose output joins the residual stream: added by
  // the linear when the norms are folded, else left in the scratch for the next norm to add.
  kernels::LinearArgs to_residual(const Tensor& x, const Tensor& weight, int64_t n) const;
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
