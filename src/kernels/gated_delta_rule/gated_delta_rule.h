// Gated delta rule (GDN core) over a batch of sequences, with the gate math and q/k L2 norm fused
// (reference section 1.5). Per token of a value head h (key head h / (n_heads_v / n_heads_k)):
//   g = -exp(A_log) * softplus(a + dt_bias);  beta = sigmoid(b)
//   q^ = q / sqrt(sum q^2 + 1e-6) * d_k^-1/2;  k^ = k / sqrt(sum k^2 + 1e-6)
//   S <- e^g S;  u = beta (v - S^T k^);  S <- S + k^ u^T;  o = S^T q^      (S is [d_k, d_v], fp32)
// The speculative state (DESIGN.md invariant 3): a sequence owns one committed state per layer,
// state[slot], plus the raw inputs (k, v, a, b) of its last step's rows in `replay`, double
// buffered by parity. A call, per sequence s with rows t = 0..T-1:
//   1. fold: S = state[slot]; apply the first n_acc[s] rows of replay[slot][1 - parity[s]] with
//      the per-token arithmetic above; if n_acc[s] > 0, state[slot] = S. These are the rows of the
//      sequence's previous step that its commit accepted: one state read and one write per step,
//      whatever k is.
//   2. kRecurrent (decode, verify): rows t in order: the update above from S, o_t out; the states
//      after the rows are not stored, their raw inputs are: replay[slot][parity][t] = (k, v, a, b)
//      of row t. The next step folds as many of them as its commit accepted.
//      kChunked (prefill): the chunked (WY) form of the same function over the rows, chunk
//      boundaries at multiples of chunk_size counted from start_position[s] (the position of the
//      first row); the final state goes to state[slot] and nothing to replay: the next step has
//      n_acc = 0. kChunked requires n_acc[s] == 0 (a prefill chunk follows a prefill chunk or a
//      fresh, zeroed state).
// Folded rows and current rows run the same per-token code, so the committed state equals a
// token-by-token run bit for bit whatever the step sizes were (tested).
#pragma once

#include <cstdint>
#include <string>

#include "core/exec_context.h"
#include "core/tensor.h"
#include "kernels/seq_layout.h"

namespace tandem::kernels {

enum class GdrMode { kRecurrent, kChunked };

// Row layout of the replay buffer: [k (n_heads_k d_k) | v (n_heads_v d_v) | a (n_heads_v) |
// b (n_heads_v)], act dtype, the rows exactly as the call received them.
constexpr int64_t gdr_replay_width(int64_t n_heads_k, int64_t d_k, int64_t n_heads_v, int64_t d_v) {
  return n_heads_k * d_k + n_heads_v * d_v + 2 * n_heads_v;
}

// The GDN output norm (gated_rms_norm.h) of `out`, optionally done by the same call: when `out` is
// set, it receives gated_rms_norm(out, z, weight, eps), bit for bit what the separate op gives
// from the rounded `out`. On CUDA the recurrent kernel fuses it for d_v <= 128 (one launch fewer
// per GDN layer); elsewhere the call runs the separate op after the rule.
struct GdrOutputNorm {
  Tensor z;       // act [n_rows, n_heads_v, d_v] (strided view allowed)
  Tensor weight;  // bf16|f16|f32 [d_v], shared across heads
  Tensor out;     // act [n_rows, n_heads_v, d_v]; empty: no norm
  float eps = 1e-6f;
};

struct GatedDeltaRuleArgs {
  Tensor q;        // act [n_rows, n_heads_k, d_k] (post-conv, strided view allowed)
  Tensor k;        // act [n_rows, n_heads_k, d_k]
  Tensor v;        // act [n_rows, n_heads_v, d_v]
  Tensor a;        // act [n_rows, n_heads_v] (strided view allowed)
  Tensor b;        // act [n_rows, n_heads_v]
  Tensor a_log;    // f32|bf16 [n_heads_v]
  Tensor dt_bias;  // f32|bf16 [n_heads_v]
  Tensor state;    // f32 [n_slots, n_heads_v, d_k, d_v], contiguous
  Tensor replay;   // act [n_slots, 2, replay_rows, gdr_replay_width(...)], contiguous
  Tensor out;      // act [n_rows, n_heads_v, d_v]
  SeqLayout seqs;
  Tensor slot;            // i32 [n_seqs]
  Tensor n_acc;           // i32 [n_seqs]: replay rows to fold first, 0..replay_rows
  Tensor parity;          // i32 [n_seqs]: 0 or 1, the replay half this call writes
  Tensor start_position;  // i32 [n_seqs]: position of each sequence's first row (kChunked)
  GdrMode mode = GdrMode::kRecurrent;
  int chunk_size = 64;
  GdrOutputNorm norm;  // optional
};

void gated_delta_rule_ref(const GatedDeltaRuleArgs& a, const ExecContext& ctx);
// One line for the start-up log: which kernel the recurrence of a d_k x d_v state takes on
// `device` (DESIGN.md invariant 6).
std::string gated_delta_rule_paths(Device device, int64_t d_k, int64_t d_v);
#ifdef TANDEM_CUDA
std::string gated_delta_rule_cuda_paths(int64_t d_k, int64_t d_v);
void gated_delta_rule_cuda(const GatedDeltaRuleArgs& a, const ExecContext& ctx);
bool gated_delta_rule_cuda_supports(int64_t d_k);  // shapes the CUDA kernel is built for
// Recurrent calls of at least n sequences take the streaming kernel (default 8; tests and
// bench/kernel_bench compare and time both paths). Returns the previous value.
int64_t gated_delta_rule_set_stream_min_seqs(int64_t n);
// The streaming kernel runs each two rows loaded together in three passes over the state instead
// of four (the second row's S^T k summed in the first row's update pass); the same bits. Default
// on: on the H100 the 27B step at 8 / 32 / 64 streams 20.56 / 26.39 / 34.41 -> 20.42 / 25.65 /
// 32.73 ms (docs/cuda.md, gap 3). Off: the four-pass form (tests compare them). Returns the
// previous value.
bool gated_delta_rule_set_stream_pairs(bool on);
// (Measured on the H100 and removed, docs/benchmarks-history.md "Eighteenth session": plain
// decode's fold row and row in 3 passes, bitwise but 2-4% slower in the step; an L2 prefetch of a
// block's next item's rows, no change; one block per SM with a ring of 3 states copied in two items
// ahead, with and without the rows loaded one item ahead, bitwise but 1.3x slower at 32 x 1 rows.)
// Opt-in (default off until measured on a GPU): calls that take the streaming kernel and carry
// 2+ rows per sequence (verify steps) run its register form instead (gated_delta_rule_regs_cuda.cu:
// S in registers between one load and one write-back, 4 rows loaded together, each update pass
// also summing the next row's S^T k); the same bits. Returns the previous value; the counter
// says how many calls took it.
bool gated_delta_rule_set_stream_registers(bool on);
int64_t gated_delta_rule_stream_register_calls();
#endif

inline void gated_delta_rule(const GatedDeltaRuleArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return gated_delta_rule_cuda(a, ctx);
#endif
  gated_delta_rule_ref(a, ctx);
}

}  // namespace tandem::kernels
