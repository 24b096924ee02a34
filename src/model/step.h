// What one forward step of a batch reads and writes, in types of the model layer (DESIGN.md
// section 5: core <- kernels <- model <- cache <- spec <- engine): the cache fills CacheViews
// with its pools and the engine fills StepBatch with device views of its fixed step buffers.
// A step's rows are grouped by sequence. Sequences [0, n_decode_seqs) take the decode/verify
// family of kernels (recurrent GDN, split-KV attention, the decode linear), the rest are prefill
// chunks (chunked GDN, prefill attention, the GEMM); a row's family is a function of the request
// (prompt rows are prefill, generated rows decode), so its bits never depend on the step's size or
// company (DESIGN.md invariant 2).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/seq_layout.h"

namespace tandem {

struct StepBatch {
  // Host view (fixed for a captured graph).
  int64_t n_rows = 0;
  int64_t n_seqs = 0;
  int64_t n_decode_seqs = 0;  // sequences [0, n_decode_seqs) are decode/verify sequences
  int64_t decode_rows = 0;    // rows [0, decode_rows) belong to them
  int64_t max_decode_rows = 0, max_prefill_rows = 0;  // bounds on one sequence's rows
  int64_t n_logit_rows = 0;
  int64_t n_decode_logit_rows = 0;  // the first logit rows are decode sequences' rows
  bool logits_all_rows = false;     // logit_rows is 0..n_rows-1 (no gather)
  // Device arrays, i32 (views of fixed buffers).
  Tensor token_ids;  // [n_rows]
  Tensor positions;  // [n_rows]: each row's position in its sequence
  Tensor kv_slots;   // [n_rows]: physical KV cache row of each row's position (< 0: not written)
  Tensor row_start;  // [n_seqs + 1]
  Tensor kv_len;     // [n_seqs]: positions valid after this step's KV write
  Tensor gdn_slot;   // [n_seqs]: GDN state slot
  Tensor n_acc;      // [n_seqs]: rows of the sequence's last step its commit accepted (0: none)
  Tensor parity;     // [n_seqs]: the GDN replay half this step writes
  Tensor start_position;  // [n_seqs]: position of the sequence's first row
  Tensor block_tables;    // [n_seqs, max_blocks_per_seq]
  Tensor logit_rows;      // [n_logit_rows]: the rows whose logits the step computes, in order

  kernels::SeqLayout decode_seqs() const {
    return {n_decode_seqs, max_decode_rows, row_start.slice(0, 0, n_decode_seqs + 1)};
  }
  kernels::SeqLayout prefill_seqs() const {
    return {n_seqs - n_decode_seqs, max_prefill_rows,
            row_start.slice(0, n_decode_seqs, n_seqs + 1)};
  }
  int64_t n_prefill_seqs() const { return n_seqs - n_decode_seqs; }
  // A per-sequence array's entries of the decode or the prefill sequences.
  Tensor decode_part(const Tensor& per_seq) const { return per_seq.slice(0, 0, n_decode_seqs); }
  Tensor prefill_part(const Tensor& per_seq) const {
    return per_seq.slice(0, n_decode_seqs, n_seqs);
  }
};

// The cache tensors of one model layer (pools shared by every sequence, indexed by block or slot).
struct LayerCacheView {
  Tensor k_cache, v_cache;  // attention: act [n_blocks, block_size, n_heads_kv, head_dim]
  Tensor ssm;               // GDN: f32 [n_slots, n_heads_v, d_k, d_v], the committed states
  Tensor conv_history;      // GDN: act [n_slots, channels, conv_kernel - 1 + step rows]
  Tensor replay;            // GDN: act [n_slots, 2, step rows, gdr_replay_width]
};

struct CacheViews {
  std::vector<LayerCacheView> layers;  // [num_layers]
  LayerCacheView mtp;                  // the MTP layer's KV cache (same block ids as the target)
  Tensor attn_workspace;               // f32 scratch of the CUDA decode-family attention
};

}  // namespace tandem
