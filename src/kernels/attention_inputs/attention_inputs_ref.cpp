// CPU reference for the attention inputs: the three ops it stands for, in order.
#include "kernels/attention_inputs/attention_inputs.h"

namespace tandem::kernels {

void attention_inputs_ref(const AttentionInputsArgs& a, const ExecContext& ctx) {
  attention_inputs_unfused(a, ctx);
}

}  // namespace tandem::kernels
