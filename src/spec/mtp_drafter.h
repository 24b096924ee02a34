// The MTP drafter (reference section 2), batched across sequences: the first MTP pass covers
// every row the target processed, pairing (h_t, x_{t+1}) at position t with h_t after the target's
// final norm; the first draft is the argmax of a sequence's last row; drafts 2..k chain the MTP's
// own post-norm output at positions t+1, t+2, ... The MTP layer's KV lives in the state pool
// (CacheViews::mtp, the sequence's own blocks); entries written for rejected positions are
// overwritten by a later first pass.
// The first pass is lazy: after each verify step a sequence's accepted hidden rows are queued
// (one copy_rows launch for all sequences), and they run in one batched MTP forward when the
// sequence next drafts, so a step that drafts nothing (k = 0) costs one small copy; by row
// invariance the batched pass computes the same bits as running each step's rows at once. Rows
// that would overflow a sequence's queue (a prefill chunk, or a long run of k = 0 steps) run
// through the first pass right away. Drafts are deterministic (argmax), so a draft changes only
// whether it is accepted, never what a sequence emits (acceptance.h).
// A draft vocabulary (--speculative-token-map, as SGLang's FR-Spec option: the tokens a draft may
// be) makes every MTP pass's logits a gather of those rows of lm_head instead of the whole
// vocabulary: on the 27B shape lm_head is 2.5 GB of bf16 (~0.6 ms of a 0.85 ms chained draft).
// The draft is the argmax over those tokens; verification is unchanged, so only acceptance can
// change, never an output.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "cache/step_buffers.h"
#include "model/arch/qwen35.h"
#include "spec/drafter.h"

namespace tandem {

class MtpDrafter : public Drafter {
 public:
  // Rows a sequence's queue holds before its first pass runs regardless.
  static constexpr int64_t kQueueRows = 64;

  // Throws when the checkpoint has no mtp.* tensors, or when draft_vocab (empty: the whole
  // vocabulary) holds an id outside the vocabulary or twice, or lm_head is FP8.
  explicit MtpDrafter(Qwen35Model& model, std::vector<int32_t> draft_vocab = {});
  ~MtpDrafter() override;

  void prepare(const DrafterSetup& setup) override;
  void begin_sequence(SeqId seq) override;
  void end_sequence(SeqId seq) override;
  void after_target_step(std::span<const TargetRows> rows) override;
  // Dropped rows leave the MTP layer's KV at their positions as its blocks held it (zeros, or an
  // earlier sequence's finite entries): the drafts attend to them, verification still decides.
  void catch_up(std::span<const SeqId> seqs, int64_t keep_rows, int64_t max_rows) override;
  std::vector<std::vector<int32_t>> propose(std::span<const DraftAsk> asks) override;

 private:
  struct PerSeq {
    int32_t queue = -1;                // index into the queue pool
    std::vector<int32_t> next_tokens;  // x_{t+1} of each queued row
    int64_t queued_start = 0;          // position of the first queued row
    const SequenceCache* cache = nullptr;
    int32_t first_draft = -1;    // argmax of the last first-pass row
    int64_t last_position = -1;  // position of the last first-pass row
  };
  // A first pass over rows that come from a sequence's queue and/or the target's hidden rows.
  struct PassSeq {
    PerSeq* seq;
    std::vector<int32_t> queue_rows;   // rows of queue_pool_ (first), then
    std::vector<int32_t> target_rows;  // rows of the model's hidden()
    std::vector<int32_t> tokens;       // x_{t+1} of each row
    int64_t start;                     // position of the first row
  };
  void first_pass(std::vector<PassSeq>& seqs);
  // Moves rows between row tensors with copy_rows through this drafter's index buffer.
  void move_rows(const Tensor& in, const Tensor& out, const std::vector<int32_t>& src,
                 const std::vector<int32_t>& dst);
  PerSeq& at(SeqId seq);
  const LinearWeight* head() const { return draft_vocab_.empty() ? nullptr : &draft_head_; }
  int32_t token_of(int32_t logit) const {
    return draft_vocab_.empty() ? logit : draft_vocab_[logit];
  }

  Qwen35Model& model_;
  DrafterSetup setup_;
  std::unique_ptr<StepBuffers> steps_;
  std::map<SeqId, PerSeq> seqs_;
  std::vector<int32_t> free_queues_;
  Tensor queue_pool_;  // act [max_seqs * kQueueRows, hidden]: queue q is rows [q Q, (q + 1) Q)
  Tensor chain_pool_;  // act [max_seqs, hidden]: the last MTP output row of each sequence
  Tensor hidden_in_, hidden_out_;     // act [max_step_rows, hidden]
  std::vector<int32_t> draft_vocab_;  // token of each draft logit; empty: logit i is token i
  LinearWeight draft_head_;           // lm_head's rows of draft_vocab_ (unset without one)
  Tensor logits_;                     // f32 [max_seqs, vocab or draft_vocab_.size()]
  Tensor argmax_ids_;                 // i32 [max_seqs]
  Tensor index_dev_, index_host_;     // i32: copy_rows indices (src then dst)
};

}  // namespace tandem
