// The shape of the state pools (DESIGN.md section 5, issue 14 item 1): KV blocks shared by every
// attention layer (target and MTP: one block id spans all of them) and GDN state slots, sized once
// at start-up from a memory budget or explicit counts. Per sequence the GDN part costs one fp32
// state per layer plus the conv history and the replay rows of one step (invariant 3), so it does
// not grow with k beyond those small per-token rows.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/config.h"

namespace tandem {

struct CacheConfig {
  int64_t block_size = 64;       // KV positions per block
  int64_t num_blocks = 0;        // usable KV blocks (the pool holds one more: the scratch block)
  int64_t num_slots = 0;         // usable GDN slots = the most sequences held at once (+1 scratch)
  int64_t step_rows = 1;         // rows of one sequence in a decode/verify step: k_max + 1
  int64_t max_model_len = 4096;  // positions one sequence may reach
  bool with_mtp = false;         // the pool also holds the MTP layer's KV

  int64_t max_blocks_per_seq() const { return (max_model_len + block_size - 1) / block_size; }
  // Block-table entries per sequence in a step's metadata: a decode step's rows may run up to
  // step_rows positions past the model length (filler rows of a graph bucket, which go to the
  // scratch block). Attention sizes its split-KV workspace by this many positions.
  int64_t table_width() const { return (max_model_len + step_rows + block_size - 1) / block_size; }
};

// Device bytes of one KV block (all attention layers, + MTP) and of one GDN slot (all GDN layers:
// state, conv history, replay rows).
int64_t kv_block_bytes(const ModelConfig& m, const CacheConfig& c, DType act);
int64_t gdn_slot_bytes(const ModelConfig& m, const CacheConfig& c, DType act);

// Fills num_blocks from a byte budget once num_slots is set: the slots (and the scratch slot and
// block) come first, the rest become blocks. Throws a user error when the budget cannot hold the
// slots plus one sequence of max_model_len.
CacheConfig fit_cache_to_budget(const ModelConfig& m, CacheConfig c, DType act,
                                int64_t budget_bytes);

// The start-up lines: pool sizes in GiB, and how many sequences of max_model_len (and of 1K and
// 32K tokens) fit.
std::string describe_cache(const ModelConfig& m, const CacheConfig& c, DType act);

}  // namespace tandem
