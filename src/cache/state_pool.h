// The state pools every sequence shares (DESIGN.md section 5; issue 14 item 1): per attention
// layer (and the MTP layer) a paged KV tensor of num_blocks + 1 blocks, per GDN layer the
// committed-state, conv-history and replay pools of num_slots + 1 slots; host free lists of block
// ids and slots; and preemption by swapping a sequence's slot and blocks to host memory and back
// (bit-exact copies). Allocated once at start-up: nothing here allocates device memory later.
// The last block and the last slot are scratch: the padding sequences of a graph bucket read and
// write them, no sequence owns them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/cache_config.h"
#include "cache/sequence_cache.h"
#include "core/exec_context.h"
#include "model/step.h"

namespace tandem {

// A preempted sequence's device state, copied to host memory.
struct SwappedState {
  std::vector<Tensor> layers;  // per pool tensor: its slot's or blocks' contents, in views() order
  int64_t n_blocks = 0;
};

class StatePool {
 public:
  StatePool(const ModelConfig& m, const CacheConfig& c, const ExecContext& ctx, DType act,
            int64_t attn_workspace_rows);

  const CacheConfig& config() const { return c_; }
  const CacheViews& views() const { return views_; }
  Device device() const { return ctx_.device; }

  int64_t free_blocks() const { return static_cast<int64_t>(free_blocks_.size()); }
  int64_t free_slots() const { return static_cast<int64_t>(free_slots_.size()); }
  int64_t used_blocks() const { return c_.num_blocks - free_blocks(); }
  int64_t used_slots() const { return c_.num_slots - free_slots(); }
  int32_t scratch_block() const { return static_cast<int32_t>(c_.num_blocks); }
  int32_t scratch_slot() const { return static_cast<int32_t>(c_.num_slots); }

  // Takes a free slot with a zeroed state and conv history (a fresh sequence); false if none.
  bool acquire(SequenceCache& seq);
  // Grows seq's block table to cover `positions` positions; false (and no change) if the pool
  // has too few free blocks.
  bool reserve(SequenceCache& seq, int64_t positions);
  int64_t blocks_for(int64_t positions) const {
    return (positions + c_.block_size - 1) / c_.block_size;
  }
  // Returns seq's slot and blocks to the free lists.
  void release(SequenceCache& seq);

  // Preemption: copies seq's slot and blocks to host memory and releases them.
  SwappedState swap_out(SequenceCache& seq);
  // Takes a fresh slot and blocks for a swapped sequence and copies its state back; false (and no
  // change) if the pool cannot hold it yet.
  bool swap_in(SequenceCache& seq, const SwappedState& state);
  // Prefix caching: a copy in host memory of seq's slot and of the blocks of its first `positions`
  // positions, seq unchanged (swap_in restores it into another sequence).
  SwappedState snapshot(const SequenceCache& seq, int64_t positions) const;

 private:
  void zero_slot(int32_t slot);
  // The pool tensors in a fixed order, each with whether it is indexed by slot (else by block).
  std::vector<std::pair<Tensor, bool>> pool_tensors() const;

  ModelConfig m_;
  CacheConfig c_;
  ExecContext ctx_;
  DType act_;
  CacheViews views_;
  std::vector<int32_t> free_blocks_, free_slots_;  // stacks: the lowest ids are taken first
};

}  // namespace tandem
