// Gated delta rule (GDN core), with the gate math and q/k L2 norm fused (reference section 1.5):
//   g = -exp(A_log) * softplus(a + dt_bias);  beta = sigmoid(b)
//   q^ = q / sqrt(sum q^2 + 1e-6) * d_k^-1/2;  k^ = k / sqrt(sum k^2 + 1e-6)
//   S <- e^g S;  u = beta (v - S^T k^);  S <- S + k^ u^T;  o = S^T q^      (S is [d_k, d_v], fp32)
// Value head h reads key head h / (n_heads_v / n_heads_k).
// State columns (DESIGN.md inv. 3): the initial state is column n_acc - 1.
//   kRecurrent: after query token t the state is stored in column t (T <= n_cols). Decode, verify.
//   kChunked:   the chunked (WY) form of the same function, chunks at fixed multiples of
//               chunk_size counted from position 0; the final state goes to column 0. Prefill.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

enum class GdrMode { kRecurrent, kChunked };

// The GDN output norm (gated_rms_norm.h) of `out`, optionally done by the same call: when `out` is
// set, it receives gated_rms_norm(out, z, weight, eps), bit for bit what the separate op gives
// from the rounded `out`. On CUDA the recurrent kernel fuses it for d_v <= 128 (one launch fewer
// per GDN layer); elsewhere the call runs the separate op after the rule.
struct GdrOutputNorm {
  Tensor z;       // act [n_tokens, n_heads_v, d_v] (strided view allowed)
  Tensor weight;  // bf16|f16|f32 [d_v], shared across heads
  Tensor out;     // act [n_tokens, n_heads_v, d_v]; empty: no norm
  float eps = 1e-6f;
};

struct GatedDeltaRuleArgs {
  Tensor q;        // act [n_tokens, n_heads_k, d_k] (post-conv, strided view allowed)
  Tensor k;        // act [n_tokens, n_heads_k, d_k]
  Tensor v;        // act [n_tokens, n_heads_v, d_v]
  Tensor a;        // act [n_tokens, n_heads_v] (strided view allowed)
  Tensor b;        // act [n_tokens, n_heads_v]
  Tensor a_log;    // f32|bf16 [n_heads_v]
  Tensor dt_bias;  // f32|bf16 [n_heads_v]
  Tensor state;    // f32 [n_cols, n_heads_v, d_k, d_v]
  Tensor n_acc;    // i32 [1]
  Tensor out;      // act [n_tokens, n_heads_v, d_v]
  GdrMode mode = GdrMode::kRecurrent;
  int64_t start_position = 0;  // position of token 0 (aligns chunk boundaries), kChunked only
  int chunk_size = 64;
  GdrOutputNorm norm;  // optional
};

void gated_delta_rule_ref(const GatedDeltaRuleArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void gated_delta_rule_cuda(const GatedDeltaRuleArgs& a, const ExecContext& ctx);
bool gated_delta_rule_cuda_supports(int64_t d_k);  // shapes the CUDA kernel is built for
#endif

inline void gated_delta_rule(const GatedDeltaRuleArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return gated_delta_rule_cuda(a, ctx);
#endif
  gated_delta_rule_ref(a, ctx);
}

}  // namespace tandem::kernels
