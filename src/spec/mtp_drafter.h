// The MTP drafter (reference section 2): after each target step, the first MTP pass over every
// processed row, pairing (h_t, x_{t+1}) at position t with h_t after the target's final norm; the
// first draft is the argmax of the last valid row; drafts 2..k chain the MTP's own post-norm
// output at positions t+1, t+2, ... The MTP layer keeps its own KV cache (SequenceState::mtp_kv);
// entries written for rejected positions are overwritten by the next first pass.
#pragma once

#include "model/arch/qwen35.h"
#include "spec/drafter.h"

namespace tandem {

class MtpDrafter : public Drafter {
 public:
  explicit MtpDrafter(Qwen35Model& model);  // throws when the checkpoint has no mtp.* tensors

  void after_target_step(SequenceState& st, std::span<const int32_t> next_tokens,
                         int64_t start) override;
  std::vector<int32_t> propose(SequenceState& st, int k, std::span<const int32_t> emitted) override;

  // Logits of the last first-pass row (what the first draft is the argmax of); for tests.
  const Tensor& last_logits() const { return logits_host_; }

 private:
  int32_t argmax_last();

  Qwen35Model& model_;
  Tensor hidden_out_;   // act [max_step_tokens, hidden]: the MTP's post-norm output rows
  Tensor chain_hidden_; // act [1, hidden]: input hidden of the next chained step
  Tensor logits_;       // f32 [1, vocab] on the model's device
  Tensor logits_host_;  // f32 [1, vocab]
  int32_t first_draft_ = -1;
  int64_t last_position_ = -1;  // position of the last first-pass row
};

}  // namespace tandem
