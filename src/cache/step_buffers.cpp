// Step layout and upload.
#include "cache/step_buffers.h"

#include <algorithm>

#include "core/error.h"

namespace tandem {

StepBuffers::StepBuffers(int64_t max_rows, int64_t max_seqs, int64_t table_width,
                         int64_t block_size, int32_t scratch_block, int32_t scratch_slot,
                         Device device)
    : max_rows_(max_rows),
      max_seqs_(max_seqs),
      table_width_(table_width),
      block_size_(block_size),
      scratch_block_(scratch_block),
      scratch_slot_(scratch_slot),
      device_(device) {
  int64_t at = 0;
  auto take = [&](int64_t n) {
    const Span s{at, n};
    at += (n + 31) / 32 * 32;  // 128-byte aligned arrays
    return s;
  };
  token_ids_ = take(max_rows), positions_ = take(max_rows), kv_slots_ = take(max_rows);
  logit_rows_ = take(max_rows), row_start_ = take(max_seqs + 1), kv_len_ = take(max_seqs);
  gdn_slot_ = take(max_seqs), n_acc_ = take(max_seqs), parity_ = take(max_seqs);
  start_position_ = take(max_seqs), block_tables_ = take(max_seqs * table_width);
  host_ = Tensor::zeros({at}, DType::kI32);
  dev_ = device == Device::kCpu ? host_ : Tensor::zeros({at}, DType::kI32, device);
}

Tensor StepBuffers::view(const Span& s, int64_t n) const {
  return dev_.slice(0, s.offset, s.offset + n);
}

void StepBuffers::upload(const Span& s) {
  if (device_ == Device::kCpu || s.size == 0) return;  // the host buffer is the device buffer
  dev_.slice(0, s.offset, s.offset + s.size).copy_from(host_.slice(0, s.offset, s.offset + s.size));
}

StepPlan StepBuffers::plan(std::span<const PlannedSeq> seqs, const StepShape& shape) {
  const int64_t n_seqs = static_cast<int64_t>(seqs.size());
  TANDEM_CHECK(n_seqs >= 1 && n_seqs <= max_seqs_, "step of {} sequences outside [1, {}]", n_seqs,
               max_seqs_);
  StepPlan plan;
  StepBatch& b = plan.batch;
  plan.row_start.assign(1, 0);
  plan.logit_start.assign(1, 0);
  int32_t* tok = host(token_ids_);
  int32_t* pos = host(positions_);
  int32_t* kvs = host(kv_slots_);
  int32_t* logit_rows = host(logit_rows_);
  int64_t rows = 0, n_logits = 0;
  bool decode_part = true;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const PlannedSeq& q = seqs[s];
    const int64_t n = q.rows, n_tok = static_cast<int64_t>(q.tokens.size());
    TANDEM_CHECK(
        n >= n_tok && (n_tok >= 1 || n == 0 || q.cache == nullptr) && rows + n <= max_rows_,
        "step: sequence {} has {} rows for {} tokens ({} of {} rows used)", s, n, n_tok, rows,
        max_rows_);
    if (!q.decode) decode_part = false;
    TANDEM_CHECK(q.decode == decode_part, "step: decode sequences must come before prefill chunks");
    if (q.decode) {
      ++b.n_decode_seqs;
      b.decode_rows = rows + n;
      b.max_decode_rows = std::max(b.max_decode_rows, n);
    } else {
      b.max_prefill_rows = std::max(b.max_prefill_rows, n);
    }
    int32_t* table = host(block_tables_) + s * table_width_;
    const int64_t own = q.cache ? static_cast<int64_t>(q.cache->blocks.size()) : 0;
    TANDEM_CHECK(own <= table_width_, "step: sequence {} holds {} blocks, the table keeps {}", s,
                 own, table_width_);
    for (int64_t i = 0; i < table_width_; ++i)
      table[i] = i < own ? q.cache->blocks[i] : scratch_block_;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = q.start + j;
      TANDEM_CHECK(p / block_size_ < table_width_, "step: position {} beyond the block table", p);
      tok[rows + j] = j < n_tok ? q.tokens[j] : 0;
      pos[rows + j] = static_cast<int32_t>(p);
      kvs[rows + j] = table[p / block_size_] * static_cast<int32_t>(block_size_) +
                      static_cast<int32_t>(p % block_size_);
    }
    if (q.logits == LogitRows::kAll) {
      for (int64_t j = 0; j < n; ++j) logit_rows[n_logits++] = static_cast<int32_t>(rows + j);
    } else if (q.logits == LogitRows::kLast && n_tok > 0) {
      logit_rows[n_logits++] = static_cast<int32_t>(rows + n_tok - 1);
    }
    if (q.decode) b.n_decode_logit_rows = n_logits;
    host(kv_len_)[s] = static_cast<int32_t>(q.start + n);
    host(gdn_slot_)[s] = q.cache ? q.cache->slot : scratch_slot_;
    host(n_acc_)[s] = q.cache ? q.cache->n_acc : 0;
    host(parity_)[s] = q.cache ? q.cache->parity : 0;
    host(start_position_)[s] = static_cast<int32_t>(q.start);
    rows += n;
    plan.row_start.push_back(rows);
    plan.logit_start.push_back(n_logits);
  }
  TANDEM_CHECK(shape.rows == 0 || (shape.rows >= rows && shape.rows <= max_rows_),
               "step: {} rows do not fit the shape of {} rows", rows, shape.rows);
  for (; rows < shape.rows; ++rows) {  // orphan rows: no sequence, no KV write, logits computed
    tok[rows] = 0;
    pos[rows] = 0;
    kvs[rows] = -1;
    logit_rows[n_logits++] = static_cast<int32_t>(rows);
  }
  b.max_decode_rows = std::max(b.max_decode_rows, shape.max_decode_rows);
  if (shape.rows > 0 && b.n_decode_seqs == n_seqs) {
    b.decode_rows = rows;
    b.n_decode_logit_rows = n_logits;
  }
  int32_t* rs = host(row_start_);
  for (int64_t s = 0; s <= n_seqs; ++s) rs[s] = static_cast<int32_t>(plan.row_start[s]);
  bool all = n_logits == rows;
  for (int64_t r = 0; all && r < n_logits; ++r) all = logit_rows[r] == r;
  // One copy: every array but the block tables sits before them, and those are filled row by row.
  upload({0, block_tables_.offset + n_seqs * table_width_});
  b.n_rows = rows;
  b.n_seqs = n_seqs;
  b.n_logit_rows = n_logits;
  b.logits_all_rows = all && n_logits > 0;
  b.token_ids = view(token_ids_, rows);
  b.positions = view(positions_, rows);
  b.kv_slots = view(kv_slots_, rows);
  b.logit_rows = view(logit_rows_, n_logits);
  b.row_start = view(row_start_, n_seqs + 1);
  b.kv_len = view(kv_len_, n_seqs);
  b.gdn_slot = view(gdn_slot_, n_seqs);
  b.n_acc = view(n_acc_, n_seqs);
  b.parity = view(parity_, n_seqs);
  b.start_position = view(start_position_, n_seqs);
  b.block_tables = view(block_tables_, n_seqs * table_width_).reshape({n_seqs, table_width_});
  return plan;
}

}  // namespace tandem
