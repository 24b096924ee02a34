// CPU reference SwiGLU, over two tensors or one gate|up tensor in the pair layout (swiglu.h).
#include "kernels/ref_common.h"
#include "kernels/swiglu/swiglu.h"

namespace tandem::kernels {

void swiglu_ref(const SwigluArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.out, "swiglu.out");
  const int64_t n = a.out.dim(0), m = a.out.dim(1);
  const bool pairs = a.gate_up.raw() != nullptr;
  const Tensor& gate = pairs ? a.gate_up : a.gate;
  const Tensor& up = pairs ? a.gate_up : a.up;
  ref::expect_f32_act(gate, pairs ? "swiglu.gate_up" : "swiglu.gate");
  ref::expect_f32_act(up, pairs ? "swiglu.gate_up" : "swiglu.up");
  swiglu_expect_shapes(a, "swiglu");
  // Pairs: feature i's gate is at column swiglu_gate_col(i), its up kSwigluPairGroup further.
  const int64_t up_offset = pairs ? kSwigluPairGroup : 0;
  for (int64_t t = 0; t < n; ++t) {
    const float* g = gate.data<const float>() + t * gate.stride(0);
    const float* u = up.data<const float>() + t * up.stride(0) + up_offset;
    float* o = a.out.data<float>() + t * a.out.stride(0);
    int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    // 8 features at once (a whole pair group: its 8 gate columns are contiguous), same bits.
    static_assert(kSwigluPairGroup == 8);
    for (; i + 8 <= m; i += 8) {
      const int64_t c = pairs ? swiglu_gate_col(i) : i;
      _mm256_storeu_ps(o + i,
                       _mm256_mul_ps(ref::silu8(_mm256_loadu_ps(g + c)), _mm256_loadu_ps(u + c)));
    }
#endif
    for (; i < m; ++i) {
      const int64_t c = pairs ? swiglu_gate_col(i) : i;
      o[i] = ref::silu(g[c]) * u[c];
    }
  }
}

}  // namespace tandem::kernels
