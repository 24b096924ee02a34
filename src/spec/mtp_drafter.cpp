// MTP drafter: queued (lazy) first pass after target steps, then chained single-row MTP steps.
#include "spec/mtp_drafter.h"

#include "kernels/argmax/argmax.h"

namespace tandem {

MtpDrafter::MtpDrafter(Qwen35Model& model) : model_(model) {
  TANDEM_CHECK(model.has_mtp(),
               "--speculative mtp needs the checkpoint's mtp.* tensors (mtp.fc.weight, "
               "mtp.layers.0.*, ...), and this checkpoint has none; use --speculative none");
  const ModelConfig& c = model.config();
  const Device d = model.context().device;
  queued_hidden_ = Tensor::zeros({model.max_step_tokens(), c.hidden_size}, model.act_dtype(), d);
  hidden_out_ = Tensor::zeros({model.max_step_tokens(), c.hidden_size}, model.act_dtype(), d);
  chain_hidden_ = Tensor::zeros({1, c.hidden_size}, model.act_dtype(), d);
  logits_ = Tensor::zeros({1, c.vocab_size}, DType::kF32, d);
  argmax_id_ = Tensor::zeros({1}, DType::kI32, d);
}

int32_t MtpDrafter::argmax_last() {
  kernels::argmax({logits_, argmax_id_}, model_.context());
  return argmax_id_.host().data<const int32_t>()[0];
}

void MtpDrafter::begin_sequence() {
  queued_tokens_.clear();
  first_draft_ = -1;
  last_position_ = -1;
}

void MtpDrafter::after_target_step(SequenceState& st, std::span<const int32_t> next_tokens,
                                   int64_t start) {
  const int64_t n = static_cast<int64_t>(next_tokens.size());
  const int64_t queued = static_cast<int64_t>(queued_tokens_.size());
  if (queued + n > queued_hidden_.dim(0)) flush(st);
  if (queued_tokens_.empty()) queued_start_ = start;
  TANDEM_CHECK(start == queued_start_ + static_cast<int64_t>(queued_tokens_.size()),
               "MTP first pass: step at position {} does not follow the queued rows", start);
  const int64_t at = static_cast<int64_t>(queued_tokens_.size());
  queued_hidden_.slice(0, at, at + n).copy_from(model_.hidden(n));
  queued_tokens_.insert(queued_tokens_.end(), next_tokens.begin(), next_tokens.end());
}

void MtpDrafter::flush(SequenceState& st) {
  const int64_t n = static_cast<int64_t>(queued_tokens_.size());
  if (n == 0) return;
  st.mtp.plan(queued_tokens_.data(), n, queued_start_, st.config().max_context);
  model_.mtp_forward(st, n, queued_hidden_.slice(0, 0, n), hidden_out_.slice(0, 0, n), logits_,
                     n - 1);
  first_draft_ = argmax_last();
  last_position_ = queued_start_ + n - 1;
  chain_hidden_.copy_from(hidden_out_.slice(0, n - 1, n));
  queued_tokens_.clear();
}

std::vector<int32_t> MtpDrafter::propose(SequenceState& st, int k, std::span<const int32_t>) {
  std::vector<int32_t> drafts;
  if (k <= 0) return drafts;
  flush(st);
  TANDEM_CHECK(first_draft_ >= 0, "MTP propose before any target step");
  drafts.push_back(first_draft_);
  for (int i = 1; i < k; ++i) {
    // Chained step: token d_i at position last + i, hidden = the previous MTP output.
    st.mtp.plan(&drafts.back(), 1, last_position_ + i, st.config().max_context);
    model_.mtp_forward(st, 1, chain_hidden_, hidden_out_.slice(0, 0, 1), logits_, 0);
    drafts.push_back(argmax_last());
    chain_hidden_.copy_from(hidden_out_.slice(0, 0, 1));
  }
  return drafts;
}

}  // namespace tandem
