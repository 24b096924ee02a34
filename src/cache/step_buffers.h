// Fixed device buffers of step metadata (DESIGN.md invariant 5: plan, then run). The host lays
// out a step's sequences here (token ids, positions, KV rows from each sequence's block table,
// GDN slot, n_acc, parity) and uploads it before the step, so that a step reads only these
// buffers and can be captured once per shape and replayed. Buffers never move: a StepBatch is a
// set of prefix views, the same addresses for every step of a given shape.
// A captured graph has a fixed shape (rows, sequences, a bound on rows per sequence); a step of
// fewer sequences or drafts fills it with padding sequences (no rows, the pool's scratch slot and
// block: every per-sequence kernel skips them) and orphan rows at the end (no sequence; the
// row-wise ops compute them, nothing reads them, their KV is not written).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/sequence_cache.h"
#include "core/tensor.h"
#include "model/step.h"

namespace tandem {

enum class LogitRows { kNone, kLast, kAll };

struct PlannedSeq {
  const SequenceCache* cache = nullptr;  // null: a padding sequence (scratch slot and block)
  std::span<const int32_t> tokens;       // the tokens of the first rows (the rest are filler)
  int64_t rows = 0;                      // rows of the sequence, >= tokens.size()
  int64_t start = 0;                     // position of the first row
  bool decode = true;                    // decode/verify family (else a prefill chunk)
  LogitRows logits = LogitRows::kNone;   // kLast: the last row holding a token
};

// A planned step: the model's view plus the host-side layout the caller reads results with.
struct StepPlan {
  StepBatch batch;
  std::vector<int64_t> row_start;    // [n_seqs + 1]
  std::vector<int64_t> logit_start;  // [n_seqs + 1]: each sequence's first row in the logits
};

// The fixed shape of a graph-captured step (zeros: the step's own).
struct StepShape {
  int64_t rows = 0;             // orphan rows pad the step to this many rows (their logits too)
  int64_t max_decode_rows = 0;  // the bound kernels size their grids by
};

class StepBuffers {
 public:
  // table_width: block-table entries per sequence (enough for max model length plus a step).
  StepBuffers(int64_t max_rows, int64_t max_seqs, int64_t table_width, int64_t block_size,
              int32_t scratch_block, int32_t scratch_slot, Device device);

  // Lays out the sequences (decode sequences first) and uploads the metadata.
  StepPlan plan(std::span<const PlannedSeq> seqs, const StepShape& shape = {});
  int64_t max_rows() const { return max_rows_; }
  int64_t max_seqs() const { return max_seqs_; }

 private:
  int64_t max_rows_, max_seqs_, table_width_, block_size_;
  int32_t scratch_block_, scratch_slot_;
  Device device_;
  // One i32 buffer on the device and its host staging copy; the arrays sit at fixed offsets.
  Tensor dev_, host_;
  struct Span {
    int64_t offset, size;
  };
  Span token_ids_, positions_, kv_slots_, logit_rows_, row_start_, kv_len_, gdn_slot_, n_acc_,
      parity_, start_position_, block_tables_;
  Tensor view(const Span& s, int64_t n) const;
  int32_t* host(const Span& s) { return host_.data<int32_t>() + s.offset; }
  void upload(const Span& s);
};

}  // namespace tandem
