// MTP drafter: queued (lazy) first pass after target steps, then chained single-row MTP steps,
// each replayed from a CUDA graph when prepare() captured one for the state.
#include "spec/mtp_drafter.h"

#include <algorithm>

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

void MtpDrafter::prepare(SequenceState& st, int k_max, bool cuda_graphs) {
  first_pass_graphs_.clear();
  chain_graph_.reset();
  graph_state_ = nullptr;
  // Not while an observer listens: it copies activations to the host, which a capture forbids.
  if (!cuda_graphs || model_.context().device != Device::kCuda || model_.has_observer() ||
      k_max < 1)
    return;
  // Capture records launches only: nothing runs, so st's MTP cache is untouched; the metadata is
  // planned into st.mtp before each replay.
  void* stream = model_.context().cuda_stream;
  const int64_t max_rows = std::min<int64_t>(k_max + 1, queued_hidden_.dim(0));
  for (int64_t n = 1; n <= max_rows; ++n) {
    auto g = std::make_unique<CudaGraph>();
    g->begin_capture(stream);
    launch_forward(st, n, queued_hidden_.slice(0, 0, n));
    g->end_capture(stream);
    first_pass_graphs_.push_back(std::move(g));
  }
  if (k_max >= 2) {
    chain_graph_ = std::make_unique<CudaGraph>();
    chain_graph_->begin_capture(stream);
    launch_forward(st, 1, chain_hidden_);
    chain_graph_->end_capture(stream);
  }
  graph_state_ = &st;
}

void MtpDrafter::launch_forward(SequenceState& st, int64_t n, const Tensor& hidden_in) {
  model_.mtp_forward(st, n, hidden_in, hidden_out_.slice(0, 0, n), logits_, n - 1);
  kernels::argmax({logits_, argmax_id_}, model_.context());
}

int32_t MtpDrafter::forward_draft(SequenceState& st, int64_t n, bool chained) {
  const CudaGraph* graph = nullptr;
  if (&st == graph_state_ && !model_.has_observer()) {
    if (chained)
      graph = chain_graph_.get();
    else if (n <= static_cast<int64_t>(first_pass_graphs_.size()))
      graph = first_pass_graphs_[n - 1].get();
  }
  if (graph)
    graph->launch(model_.context().cuda_stream);
  else
    launch_forward(st, n, chained ? chain_hidden_ : queued_hidden_.slice(0, 0, n));
  return argmax_id_.host().data<const int32_t>()[0];  // outside the graph: the one sync
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

void MtpDrafter::flush(SequenceState& st, int64_t keep_rows) {
  const int64_t queued = static_cast<int64_t>(queued_tokens_.size());
  const int64_t n = queued - std::clamp<int64_t>(keep_rows, 0, queued);
  if (n == 0) return;
  st.mtp.plan(queued_tokens_.data(), n, queued_start_, st.config().max_context);
  first_draft_ = forward_draft(st, n, false);
  last_position_ = queued_start_ + n - 1;
  chain_hidden_.copy_from(hidden_out_.slice(0, n - 1, n));
  queued_tokens_.erase(queued_tokens_.begin(), queued_tokens_.begin() + n);
  queued_start_ += n;
  const int64_t kept = queued - n;
  if (kept > 0) {  // to the front of the queue, through hidden_out_ (the rows may overlap)
    hidden_out_.slice(0, 0, kept).copy_from(queued_hidden_.slice(0, n, queued));
    queued_hidden_.slice(0, 0, kept).copy_from(hidden_out_.slice(0, 0, kept));
  }
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
    drafts.push_back(forward_draft(st, 1, true));
    if (i + 1 < k) chain_hidden_.copy_from(hidden_out_.slice(0, 0, 1));  // the last one is unused
  }
  return drafts;
}

}  // namespace tandem
