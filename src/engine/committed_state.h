// The committed state a sequence's next step will read, materialised for comparison (tests, the
// divergence finder): per GDN layer the recurrent state after folding the sequence's n_acc
// pending rows (run by the model's own gated_delta_rule kernel on the pool's scratch slot, so the
// bits are the backend's), and the conv window at offset n_acc; per attention layer (and the MTP
// layer) K and V of positions [0, n_past). Values are widened to f32. Not for the hot path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/state_pool.h"
#include "model/arch/qwen35.h"

namespace tandem {

struct NamedState {
  std::string name;  // "ssm", "conv window", "kv k", "kv v", "mtp kv k", ...
  int64_t layer;
  std::vector<float> values;
};

std::vector<NamedState> committed_state(const Qwen35Model& model, StatePool& pool,
                                        const SequenceCache& seq, bool with_mtp_kv = false);

}  // namespace tandem
