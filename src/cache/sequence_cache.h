// One sequence's hold on the state pools and where its committed state stands (DESIGN.md
// invariant 3). The commit of a verify step changes one integer, n_acc (accepted drafts + 1): it
// tells every GDN layer how many of the step's rows to fold into the committed state at the next
// step, and the conv history where its window starts; n_past follows from it (host bookkeeping).
// A prefill chunk folds its own rows (n_acc 0 afterwards). parity is the half of the GDN replay
// buffer the next verify step writes: it alternates every verify step, whatever the commit says.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

struct SequenceCache {
  int32_t slot = -1;            // GDN state slot; -1: none held
  std::vector<int32_t> blocks;  // block table: position p lives in blocks[p / block_size]
  int64_t n_past = 0;           // positions whose effect is committed (KV written, state folded)
  int32_t n_acc = 0;            // rows of the last step accepted by its commit (0 after prefill)
  int32_t parity = 0;           // replay half of the next verify step

  bool resident() const { return slot >= 0; }
  // The physical KV row of position pos.
  int32_t kv_slot(int64_t pos, int64_t block_size) const {
    return blocks[pos / block_size] * static_cast<int32_t>(block_size) +
           static_cast<int32_t>(pos % block_size);
  }
  // After a prefill chunk of n rows: its rows are folded already.
  void commit_prefill(int64_t n) {
    n_past += n;
    n_acc = 0;
  }
  // After a verify step: the commit (accepted drafts + 1 rows are committed).
  void commit_verify(int32_t accepted_rows) {
    n_past += accepted_rows;
    n_acc = accepted_rows;
    parity ^= 1;
  }
};

}  // namespace tandem
