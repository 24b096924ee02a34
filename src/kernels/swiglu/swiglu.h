// SwiGLU activation: out = silu(gate) * up, elementwise (fp32 math). gate and up come either as two
// tensors or as one gate|up tensor in the pair layout below, which is how the MLP's fused gate|up
// projection lays out its rows (qwen35_weights.h) so that a 16-row mma tile of the decode linear
// holds a gate and its up (linear.h, LinearEpilogue::kSwiGluPairs).
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

// The pair layout of a gate|up tensor [.., 2 inter] (inter a multiple of kSwigluPairGroup): column
// groups of 2 kSwigluPairGroup, each kSwigluPairGroup gate columns followed by the up columns of
// the same features. Feature i's gate is at swiglu_gate_col(i), its up kSwigluPairGroup further.
constexpr int64_t kSwigluPairGroup = 8;
constexpr int64_t swiglu_gate_col(int64_t i) {
  return i / kSwigluPairGroup * (2 * kSwigluPairGroup) + i % kSwigluPairGroup;
}

struct SwigluArgs {
  Tensor gate;  // act [n_tokens, inter] (strided rows allowed); empty when gate_up is given
  Tensor up;    // act [n_tokens, inter]; empty when gate_up is given
  Tensor out;   // act [n_tokens, inter]
  // Instead of gate and up: act [n_tokens, 2 inter] in the pair layout (strided rows allowed).
  Tensor gate_up;
};

// The shapes both implementations accept: gate and up like out, or gate_up [n_tokens, 2 inter] in
// the pair layout; `op` names the implementation in the message.
inline void swiglu_expect_shapes(const SwigluArgs& a, const char* op) {
  const int64_t n = a.out.dim(0), inter = a.out.dim(1);
  if (a.gate_up.raw() != nullptr) {
    TANDEM_CHECK(
        inter % kSwigluPairGroup == 0 && a.gate_up.dim(0) == n && a.gate_up.dim(1) == 2 * inter,
        "{}: gate_up {} must be [n_tokens, 2 inter] for out {} (inter a multiple of {})", op,
        a.gate_up.describe(), a.out.describe(), kSwigluPairGroup);
  } else {
    TANDEM_CHECK(a.gate.shape() == a.out.shape() && a.up.shape() == a.out.shape(),
                 "{}: gate {} up {} out {} differ", op, a.gate.describe(), a.up.describe(),
                 a.out.describe());
  }
}

void swiglu_ref(const SwigluArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void swiglu_cuda(const SwigluArgs& a, const ExecContext& ctx);
#endif

inline void swiglu(const SwigluArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return swiglu_cuda(a, ctx);
#endif
  swiglu_ref(a, ctx);
}

}  // namespace tandem::kernels
