// The MTP drafter (reference section 2): the first MTP pass covers every row the target processed,
// pairing (h_t, x_{t+1}) at position t with h_t after the target's final norm; the first draft is
// the argmax of the last row; drafts 2..k chain the MTP's own post-norm output at positions t+1,
// t+2, ... The MTP layer keeps its own KV cache (SequenceState::mtp_kv); entries written for
// rejected positions are overwritten by a later first pass.
// The first pass is lazy: after each target step the hidden rows are queued, and they are run in
// one batch when drafts are next needed (or the queue is full). A step that drafts nothing (k = 0,
// chosen by speculation control) therefore costs one small copy, and by row invariance the batched
// pass computes the same bits as running each step's rows at once.
#pragma once

#include <vector>

#include "model/arch/qwen35.h"
#include "spec/drafter.h"

namespace tandem {

class MtpDrafter : public Drafter {
 public:
  explicit MtpDrafter(Qwen35Model& model);  // throws when the checkpoint has no mtp.* tensors

  void begin_sequence() override;
  void after_target_step(SequenceState& st, std::span<const int32_t> next_tokens,
                         int64_t start) override;
  std::vector<int32_t> propose(SequenceState& st, int k, std::span<const int32_t> emitted) override;
  void catch_up(SequenceState& st) override { flush(st); }

 private:
  void flush(SequenceState& st);  // runs the first pass over the queued rows
  int32_t argmax_last();

  Qwen35Model& model_;
  Tensor
      queued_hidden_;  // act [max_step_tokens, hidden]: target hidden rows awaiting the first pass
  std::vector<int32_t> queued_tokens_;  // x_{t+1} of each queued row
  int64_t queued_start_ = 0;            // position of the first queued row
  Tensor hidden_out_;    // act [max_step_tokens, hidden]: the MTP's post-norm output rows
  Tensor chain_hidden_;  // act [1, hidden]: input hidden of the next chained step
  Tensor logits_;        // f32 [1, vocab] on the model's device
  Tensor argmax_id_;     // i32 [1] on the model's device: only the draft crosses to the host
  int32_t first_draft_ = -1;
  int64_t last_position_ = -1;  // position of the last first-pass row
};

}  // namespace tandem
