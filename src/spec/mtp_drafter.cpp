// MTP drafter: first pass after each target step, then chained single-row MTP steps.
#include "spec/mtp_drafter.h"

#include "kernels/argmax/argmax.h"

namespace tandem {

MtpDrafter::MtpDrafter(Qwen35Model& model) : model_(model) {
  TANDEM_CHECK(model.has_mtp(),
               "--speculative mtp needs the checkpoint's mtp.* tensors (mtp.fc.weight, "
               "mtp.layers.0.*, ...), and this checkpoint has none; use --speculative none");
  const ModelConfig& c = model.config();
  const Device d = model.context().device;
  hidden_out_ = Tensor::zeros({model.max_step_tokens(), c.hidden_size}, model.act_dtype(), d);
  chain_hidden_ = Tensor::zeros({1, c.hidden_size}, model.act_dtype(), d);
  logits_ = Tensor::zeros({1, c.vocab_size}, DType::kF32, d);
}

int32_t MtpDrafter::argmax_last() {
  logits_host_ = logits_.device() == Device::kCpu ? logits_ : logits_.to(Device::kCpu);
  Tensor out = Tensor::zeros({1}, DType::kI32);
  kernels::argmax_ref({.logits = logits_host_, .out = out}, ExecContext{});
  return out.data<int32_t>()[0];
}

void MtpDrafter::after_target_step(SequenceState& st, std::span<const int32_t> next_tokens,
                                   int64_t start) {
  const int64_t n = static_cast<int64_t>(next_tokens.size());
  st.mtp.plan(next_tokens.data(), n, start, st.config().max_context);
  model_.mtp_forward(st, n, model_.hidden(n), hidden_out_.slice(0, 0, n), logits_, n - 1);
  first_draft_ = argmax_last();
  last_position_ = start + n - 1;
  chain_hidden_.copy_from(hidden_out_.slice(0, n - 1, n));
}

std::vector<int32_t> MtpDrafter::propose(SequenceState& st, int k, std::span<const int32_t>) {
  std::vector<int32_t> drafts;
  if (k <= 0) return drafts;
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
