// The MTP drafter (reference section 2): the first MTP pass covers every row the target processed,
// pairing (h_t, x_{t+1}) at position t with h_t after the target's final norm; the first draft is
// the argmax of the last row; drafts 2..k chain the MTP's own post-norm output at positions t+1,
// t+2, ... The MTP layer keeps its own KV cache (SequenceState::mtp_kv); entries written for
// rejected positions are overwritten by a later first pass.
// The first pass is lazy: after each target step the hidden rows are queued, and they are run in
// one batch when drafts are next needed (or the queue is full). A step that drafts nothing (k = 0,
// chosen by speculation control) therefore costs one small copy, and by row invariance the batched
// pass computes the same bits as running each step's rows at once.
// On CUDA the forwards replay CUDA graphs captured by prepare() (invariant 5: they read only fixed
// buffers, and the host plans st.mtp between replays); the same kernels run either way, so the
// drafts are the same bits as eager launches.
#pragma once

#include <memory>
#include <vector>

#include "core/cuda_graph.h"
#include "model/arch/qwen35.h"
#include "spec/drafter.h"

namespace tandem {

class MtpDrafter : public Drafter {
 public:
  explicit MtpDrafter(Qwen35Model& model);  // throws when the checkpoint has no mtp.* tensors

  // When cuda_graphs is set, the model runs on CUDA and no activation observer is attached,
  // captures the MTP forward (with the argmax of its last row) over st's buffers: one first-pass
  // graph per n = 1..k_max + 1 queued rows and, for k_max >= 2, one chained-step graph. The graphs
  // bake in the device addresses of st (its st.mtp metadata, mtp_kv, block table, attention
  // workspace), so they replay only for calls that pass this same st (compared by address: a state
  // that replaces a destroyed one needs prepare again). Any other state, a larger first pass (rows
  // queued over several k = 0 steps, the prompt), or an observer attached later runs eagerly.
  // Calling prepare again drops the graphs and captures for the st it is given.
  void prepare(SequenceState& st, int k_max, bool cuda_graphs) override;
  bool uses_cuda_graphs() const { return graph_state_ != nullptr; }
  void begin_sequence() override;
  void after_target_step(SequenceState& st, std::span<const int32_t> next_tokens,
                         int64_t start) override;
  std::vector<int32_t> propose(SequenceState& st, int k, std::span<const int32_t> emitted) override;
  void catch_up(SequenceState& st, int64_t keep_rows = 0) override { flush(st, keep_rows); }

 private:
  // Runs the first pass over the queued rows but the last keep_rows, which stay queued.
  void flush(SequenceState& st, int64_t keep_rows = 0);
  // The MTP forward of the n rows planned in st.mtp, from queued_hidden_ (first pass) or from
  // chain_hidden_ (chained step, n = 1), then the argmax of its last row: a graph replay when one
  // was captured for st and n, eager launches otherwise. Returns the draft (one int to the host).
  int32_t forward_draft(SequenceState& st, int64_t n, bool chained);
  void launch_forward(SequenceState& st, int64_t n, const Tensor& hidden_in);  // what is captured

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

  const SequenceState* graph_state_ = nullptr;  // the state the graphs were captured over
  std::vector<std::unique_ptr<CudaGraph>> first_pass_graphs_;  // [n - 1]: first pass of n rows
  std::unique_ptr<CudaGraph> chain_graph_;                     // chained step (n = 1)
};

}  // namespace tandem
