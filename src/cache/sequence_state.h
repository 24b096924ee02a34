// Per-sequence model state: paged KV for every attention layer (target and MTP), and for every
// GDN layer the speculative state of DESIGN.md invariant 3: k_max + 1 SSM columns and a conv
// history of length (Kc - 1) + k_max. The one committed quantity is `n_acc` (device i32[1]);
// every layer derives its read column and conv offset from it.
// Also the fixed device buffers of step metadata (token ids, positions, kv_len) that the host
// writes before a step, so that a step can be captured once and replayed (invariant 5).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace tandem {

struct StateConfig {
  int64_t max_context = 4096;     // positions the KV cache can hold
  int k_max = 0;                  // largest number of drafts per step
  int64_t block_size = 64;        // KV cache page, in tokens
  int64_t max_step_tokens = 256;  // largest step (prefill chunk); a multiple of 64
};

struct GdnLayerState {
  Tensor conv_history;  // act [channels, conv_kernel - 1 + k_max]
  Tensor ssm;           // f32 [k_max + 1, n_heads_v, d_k, d_v]
};

struct KvLayerCache {
  Tensor k, v;  // act [n_blocks, block_size, n_heads_kv, head_dim]
};

// Fixed device buffers describing one forward step; the host fills them before the step.
struct StepMeta {
  Tensor token_ids;  // i32 [max_step_tokens]
  Tensor positions;  // i32 [max_step_tokens]
  Tensor kv_len;     // i32 [1]: KV positions valid after the step's write
  // Writes token ids, positions [start, start + n) and kv_len = start + n.
  void plan(const int32_t* tokens, int64_t n, int64_t start, int64_t max_context);
};

class SequenceState {
 public:
  SequenceState(const ModelConfig& cfg, const StateConfig& sc, Device device, DType act_dtype,
                bool with_mtp);

  const StateConfig& config() const { return sc_; }
  Device device() const { return device_; }

  std::vector<GdnLayerState> gdn;  // indexed by model layer; empty entries for attention layers
  std::vector<KvLayerCache> kv;    // indexed by model layer; empty entries for GDN layers
  KvLayerCache mtp_kv;             // the MTP layer's own KV cache
  Tensor block_table;              // i32 [max_blocks], identity pages for now

  Tensor n_acc;           // i32 [1], device
  Tensor attn_workspace;  // f32 scratch of the CUDA attention (split-KV partials); empty on cpu
  StepMeta target;        // metadata of the next target step
  StepMeta mtp;           // metadata of the next MTP step

  // Host-side bookkeeping.
  int64_t n_past = 0;  // tokens whose effect is committed in the target state

  void set_n_acc(int32_t n);  // the commit
  int32_t n_acc_host() const { return n_acc_host_; }
  void reset();  // empty sequence: zero state, n_acc = 1

 private:
  StateConfig sc_;
  Device device_;
  int32_t n_acc_host_ = 1;
};

}  // namespace tandem
