// MTP drafter: per-sequence queues of target hidden rows, batched first passes, batched chained
// steps.
#include "spec/mtp_drafter.h"

#include <algorithm>
#include <cstring>

#include "kernels/argmax/argmax.h"
#include "kernels/copy_rows/copy_rows.h"
#include "kernels/embedding/embedding.h"

namespace tandem {

namespace {

// Rows ids of w (a [vocab, hidden] matrix of any float dtype) as a matrix of the same dtype on
// w's device: by the embedding op where that keeps the dtype (w in the activation dtype), else
// through host memory.
Tensor gather_rows(const Tensor& w, const std::vector<int32_t>& ids, DType act,
                   const ExecContext& ctx) {
  const int64_t n = static_cast<int64_t>(ids.size()), h = w.dim(1);
  Tensor id_host = Tensor::zeros({n}, DType::kI32);
  std::copy(ids.begin(), ids.end(), id_host.data<int32_t>());
  if (w.dtype() == act) {
    Tensor out = Tensor::zeros({n, h}, act, w.device());
    kernels::embedding({.ids = id_host.to(w.device()), .table = w, .out = out}, ctx);
    return out;
  }
  const Tensor src = w.host();
  Tensor out = Tensor::zeros({n, h}, w.dtype());
  const int64_t row_bytes = h * dtype_size(w.dtype());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(static_cast<char*>(out.raw()) + i * row_bytes,
                static_cast<const char*>(src.raw()) + ids[i] * row_bytes, row_bytes);
  }
  return out.to(w.device());
}

}  // namespace

MtpDrafter::MtpDrafter(Qwen35Model& model, std::vector<int32_t> draft_vocab)
    : model_(model), draft_vocab_(std::move(draft_vocab)) {
  TANDEM_CHECK(model.has_mtp(),
               "--speculative mtp needs the checkpoint's mtp.* tensors (mtp.fc.weight, "
               "mtp.layers.0.*, ...), and this checkpoint has none; use --speculative none");
  if (draft_vocab_.empty()) return;
  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> sorted = draft_vocab_;
  std::sort(sorted.begin(), sorted.end());
  TANDEM_CHECK(sorted.front() >= 0 && sorted.back() < vocab,
               "--speculative-token-map: token id {} is outside the vocabulary [0, {})",
               sorted.front() < 0 ? sorted.front() : sorted.back(), vocab);
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  TANDEM_CHECK(dup == sorted.end(), "--speculative-token-map: token id {} appears twice", *dup);
  const LinearWeight& lm_head = model.weights().lm_head;
  TANDEM_CHECK(lm_head.weight.dtype() != DType::kF8E4M3,
               "--speculative-token-map: this checkpoint's lm_head is FP8, which a draft "
               "vocabulary does not support (released FP8 checkpoints keep it in bf16)");
  draft_head_.weight =
      gather_rows(lm_head.weight, draft_vocab_, model.act_dtype(), model.context());
}

MtpDrafter::~MtpDrafter() = default;

void MtpDrafter::prepare(const DrafterSetup& setup) {
  TANDEM_CHECK(setup.cache != nullptr && setup.cache->mtp.k_cache.raw() != nullptr,
               "MTP drafter: the state pool holds no MTP KV cache");
  setup_ = setup;
  const ModelConfig& c = model_.config();
  const Device d = model_.context().device;
  const DType act = model_.act_dtype();
  const int64_t rows = model_.max_step_rows(), seqs = setup.max_seqs, h = c.hidden_size;
  steps_ = std::make_unique<StepBuffers>(rows, seqs, setup.table_width, setup.block_size,
                                         setup.scratch_block, setup.scratch_slot, d);
  queue_pool_ = Tensor::zeros({seqs * kQueueRows, h}, act, d);
  chain_pool_ = Tensor::zeros({seqs, h}, act, d);
  hidden_in_ = Tensor::zeros({rows, h}, act, d);
  hidden_out_ = Tensor::zeros({rows, h}, act, d);
  const int64_t logit_cols =
      draft_vocab_.empty() ? c.vocab_size : static_cast<int64_t>(draft_vocab_.size());
  logits_ = Tensor::zeros({seqs, logit_cols}, DType::kF32, d);
  argmax_ids_ = Tensor::zeros({seqs}, DType::kI32, d);
  index_host_ = Tensor::zeros({2 * (rows + seqs * kQueueRows)}, DType::kI32);
  index_dev_ = d == Device::kCpu ? index_host_ : index_host_.to(d);
  free_queues_.clear();
  for (int64_t q = seqs - 1; q >= 0; --q) free_queues_.push_back(static_cast<int32_t>(q));
  seqs_.clear();
}

void MtpDrafter::begin_sequence(SeqId seq) {
  TANDEM_CHECK(steps_ != nullptr, "MTP drafter: begin_sequence before prepare");
  TANDEM_CHECK(!free_queues_.empty(), "MTP drafter: more than {} sequences at once",
               setup_.max_seqs);
  PerSeq ps;
  ps.queue = free_queues_.back();
  free_queues_.pop_back();
  seqs_[seq] = std::move(ps);
}

void MtpDrafter::end_sequence(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  free_queues_.push_back(it->second.queue);
  seqs_.erase(it);
}

MtpDrafter::PerSeq& MtpDrafter::at(SeqId seq) {
  auto it = seqs_.find(seq);
  TANDEM_CHECK(it != seqs_.end(), "MTP drafter: unknown sequence {}", seq);
  return it->second;
}

void MtpDrafter::move_rows(const Tensor& in, const Tensor& out, const std::vector<int32_t>& src,
                           const std::vector<int32_t>& dst) {
  const int64_t n = static_cast<int64_t>(src.size());
  if (n == 0) return;
  TANDEM_CHECK(2 * n <= index_host_.dim(0), "MTP drafter: {} row moves exceed the index buffer", n);
  std::copy(src.begin(), src.end(), index_host_.data<int32_t>());
  std::copy(dst.begin(), dst.end(), index_host_.data<int32_t>() + n);
  if (index_dev_.device() != Device::kCpu)
    index_dev_.slice(0, 0, 2 * n).copy_from(index_host_.slice(0, 0, 2 * n));
  kernels::copy_rows({.in = in,
                      .out = out,
                      .src = index_dev_.slice(0, 0, n),
                      .dst = index_dev_.slice(0, n, 2 * n)},
                     model_.context());
}

void MtpDrafter::after_target_step(std::span<const TargetRows> rows) {
  std::vector<PassSeq> overflow;
  std::vector<int32_t> src, dst;
  for (const TargetRows& r : rows) {
    PerSeq& ps = at(r.seq);
    ps.cache = r.cache;
    const int64_t n = static_cast<int64_t>(r.next_tokens.size());
    if (n == 0) continue;
    const int64_t queued = static_cast<int64_t>(ps.next_tokens.size());
    if (queued == 0) ps.queued_start = r.start;
    TANDEM_CHECK(r.start == ps.queued_start + queued,
                 "MTP first pass: sequence {} step at position {} does not follow its queue", r.seq,
                 r.start);
    if (queued + n <= kQueueRows) {  // queue the rows: their first pass runs when drafts are due
      for (int64_t j = 0; j < n; ++j) {
        src.push_back(static_cast<int32_t>(r.row + j));
        dst.push_back(static_cast<int32_t>(ps.queue * kQueueRows + queued + j));
      }
      ps.next_tokens.insert(ps.next_tokens.end(), r.next_tokens.begin(), r.next_tokens.end());
      continue;
    }
    PassSeq p{&ps, {}, {}, ps.next_tokens, ps.queued_start};  // too many: the first pass now
    for (int64_t j = 0; j < queued; ++j) p.queue_rows.push_back(ps.queue * kQueueRows + j);
    for (int64_t j = 0; j < n; ++j) p.target_rows.push_back(static_cast<int32_t>(r.row + j));
    p.tokens.insert(p.tokens.end(), r.next_tokens.begin(), r.next_tokens.end());
    ps.next_tokens.clear();
    overflow.push_back(std::move(p));
  }
  move_rows(model_.hidden(model_.max_step_rows()), queue_pool_, src, dst);
  if (!overflow.empty()) first_pass(overflow);
}

void MtpDrafter::first_pass(std::vector<PassSeq>& seqs) {
  const int64_t max_rows = model_.max_step_rows();
  const int64_t decode_max = setup_.k_max + 1;  // longer sequences take the prefill family
  // Each sequence's rows in pieces of at most max_rows, run in order: a pass takes the first
  // remaining piece of as many sequences as fit.
  struct Piece {
    std::vector<std::pair<bool, int32_t>> rows;  // (from the queue, source row)
    std::vector<int32_t> tokens;
    int64_t start;
  };
  std::vector<std::vector<Piece>> pieces(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    const PassSeq& p = seqs[s];
    std::vector<std::pair<bool, int32_t>> all;
    for (int32_t r : p.queue_rows) all.emplace_back(true, r);
    for (int32_t r : p.target_rows) all.emplace_back(false, r);
    for (size_t at = 0; at < all.size(); at += static_cast<size_t>(max_rows)) {
      const size_t end = std::min(all.size(), at + static_cast<size_t>(max_rows));
      pieces[s].push_back({{all.begin() + at, all.begin() + end},
                           {p.tokens.begin() + at, p.tokens.begin() + end},
                           p.start + static_cast<int64_t>(at)});
    }
  }
  std::vector<size_t> next(seqs.size(), 0);
  for (;;) {
    std::vector<size_t> take;  // sequences of this pass
    int64_t rows = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (next[s] == pieces[s].size()) continue;
      const int64_t n = static_cast<int64_t>(pieces[s][next[s]].rows.size());
      if (rows + n > max_rows || static_cast<int64_t>(take.size()) >= setup_.max_seqs) continue;
      take.push_back(s);
      rows += n;
    }
    if (take.empty()) break;
    auto piece_of = [&](size_t s) -> const Piece& { return pieces[s][next[s]]; };
    std::stable_partition(take.begin(), take.end(), [&](size_t s) {  // decode family first
      return static_cast<int64_t>(piece_of(s).rows.size()) <= decode_max;
    });
    std::vector<PlannedSeq> planned;
    std::vector<int32_t> q_src, q_dst, t_src, t_dst;
    int64_t row = 0;
    for (size_t s : take) {
      const Piece& pc = piece_of(s);
      const int64_t n = static_cast<int64_t>(pc.rows.size());
      for (int64_t j = 0; j < n; ++j) {
        (pc.rows[j].first ? q_src : t_src).push_back(pc.rows[j].second);
        (pc.rows[j].first ? q_dst : t_dst).push_back(static_cast<int32_t>(row + j));
      }
      planned.push_back({.cache = seqs[s].seq->cache,
                         .tokens = pc.tokens,
                         .rows = n,
                         .start = pc.start,
                         .decode = n <= decode_max,
                         .logits = LogitRows::kLast});
      row += n;
    }
    move_rows(queue_pool_, hidden_in_, q_src, q_dst);
    move_rows(model_.hidden(max_rows), hidden_in_, t_src, t_dst);
    const StepPlan plan = steps_->plan(planned);
    const int64_t n_seqs = static_cast<int64_t>(planned.size());
    model_.mtp_forward(plan.batch, *setup_.cache, hidden_in_.slice(0, 0, row),
                       hidden_out_.slice(0, 0, row), logits_.slice(0, 0, n_seqs), head());
    kernels::argmax({logits_.slice(0, 0, n_seqs), argmax_ids_.slice(0, 0, n_seqs)},
                    model_.context());
    const Tensor ids = argmax_ids_.slice(0, 0, n_seqs).host();
    std::vector<int32_t> c_src, c_dst;
    for (int64_t j = 0; j < n_seqs; ++j) {
      const size_t s = take[j];
      const Piece& pc = piece_of(s);
      PerSeq* ps = seqs[s].seq;
      ps->first_draft = token_of(ids.data<const int32_t>()[j]);
      ps->last_position = pc.start + static_cast<int64_t>(pc.rows.size()) - 1;
      c_src.push_back(static_cast<int32_t>(plan.row_start[j + 1] - 1));
      c_dst.push_back(ps->queue);
    }
    move_rows(hidden_out_, chain_pool_, c_src, c_dst);
    for (size_t s : take) ++next[s];
  }
}

void MtpDrafter::catch_up(std::span<const SeqId> ids, int64_t keep_rows, int64_t max_rows) {
  std::vector<PassSeq> pass;
  std::vector<std::pair<PerSeq*, int64_t>> kept;
  for (SeqId id : ids) {
    PerSeq& ps = at(id);
    const int64_t queued = static_cast<int64_t>(ps.next_tokens.size());
    const int64_t n = queued - std::clamp<int64_t>(keep_rows, 0, queued);
    if (n <= 0) continue;
    const int64_t drop = std::max<int64_t>(0, n - max_rows);  // the oldest rows: no pass
    PassSeq p{&ps,
              {},
              {},
              {ps.next_tokens.begin() + drop, ps.next_tokens.begin() + n},
              ps.queued_start + drop};
    for (int64_t j = drop; j < n; ++j) p.queue_rows.push_back(ps.queue * kQueueRows + j);
    if (drop < n) pass.push_back(std::move(p));
    kept.emplace_back(&ps, n);
  }
  if (kept.empty()) return;
  if (!pass.empty()) first_pass(pass);
  // The kept rows move to the front of their queues, through hidden_out_ (they may overlap).
  std::vector<int32_t> src, mid, dst;
  for (auto& [ps, n] : kept) {
    const int64_t rest = static_cast<int64_t>(ps->next_tokens.size()) - n;
    for (int64_t j = 0; j < rest; ++j) {
      src.push_back(ps->queue * kQueueRows + n + j);
      mid.push_back(static_cast<int32_t>(src.size() - 1));
      dst.push_back(ps->queue * kQueueRows + j);
    }
    ps->next_tokens.erase(ps->next_tokens.begin(), ps->next_tokens.begin() + n);
    ps->queued_start += n;
  }
  move_rows(queue_pool_, hidden_out_, src, mid);
  move_rows(hidden_out_, queue_pool_, mid, dst);
}

std::vector<std::vector<int32_t>> MtpDrafter::propose(std::span<const DraftAsk> asks) {
  std::vector<std::vector<int32_t>> drafts(asks.size());
  std::vector<PassSeq> pass;
  std::vector<PerSeq*> per(asks.size());
  int k_max = 0;
  for (size_t i = 0; i < asks.size(); ++i) {
    PerSeq& ps = at(asks[i].seq);
    ps.cache = asks[i].cache;
    per[i] = &ps;
    k_max = std::max(k_max, asks[i].k);
    const int64_t queued = static_cast<int64_t>(ps.next_tokens.size());
    if (queued == 0) continue;
    PassSeq p{&ps, {}, {}, ps.next_tokens, ps.queued_start};
    for (int64_t j = 0; j < queued; ++j) p.queue_rows.push_back(ps.queue * kQueueRows + j);
    pass.push_back(std::move(p));
    ps.next_tokens.clear();
  }
  if (!pass.empty()) first_pass(pass);
  for (size_t i = 0; i < asks.size(); ++i) {
    TANDEM_CHECK(per[i]->first_draft >= 0, "MTP propose for sequence {} before any target step",
                 asks[i].seq);
    if (asks[i].k >= 1) drafts[i].push_back(per[i]->first_draft);
  }
  // Chained steps: draft i + 1 from draft i at position last + i, hidden = the MTP's last output.
  for (int step = 1; step < k_max; ++step) {
    std::vector<size_t> active;
    for (size_t i = 0; i < asks.size(); ++i)
      if (asks[i].k > step) active.push_back(i);
    std::vector<PlannedSeq> planned;
    std::vector<int32_t> src, dst;
    for (size_t j = 0; j < active.size(); ++j) {
      const size_t i = active[j];
      planned.push_back({.cache = per[i]->cache,
                         .tokens = std::span<const int32_t>(&drafts[i].back(), 1),
                         .rows = 1,
                         .start = per[i]->last_position + step,
                         .decode = true,
                         .logits = LogitRows::kLast});
      src.push_back(per[i]->queue);
      dst.push_back(static_cast<int32_t>(j));
    }
    const int64_t n = static_cast<int64_t>(active.size());
    move_rows(chain_pool_, hidden_in_, src, dst);
    const StepPlan plan = steps_->plan(planned);
    model_.mtp_forward(plan.batch, *setup_.cache, hidden_in_.slice(0, 0, n),
                       hidden_out_.slice(0, 0, n), logits_.slice(0, 0, n), head());
    kernels::argmax({logits_.slice(0, 0, n), argmax_ids_.slice(0, 0, n)}, model_.context());
    const Tensor ids = argmax_ids_.slice(0, 0, n).host();
    for (size_t j = 0; j < active.size(); ++j)
      drafts[active[j]].push_back(token_of(ids.data<const int32_t>()[j]));
    if (step + 1 < k_max) move_rows(hidden_out_, chain_pool_, dst, src);
  }
  return drafts;
}

}  // namespace tandem
