// CPU reference for the attention inputs: the three ops it stands for, in order.
#include "kernels/attention_inputs/attention_inputs.h"
#include "kernels/kv_cache/kv_cache.h"
#include "kernels/rms_norm/rms_norm.h"

namespace tandem::kernels {

void attention_inputs_ref(const AttentionInputsArgs& a, const ExecContext& ctx) {
  for (const auto& [t, norm] : {std::pair{a.q, a.q_norm}, std::pair{a.k, a.k_norm}}) {
    rms_norm_ref({.x = t,
                  .weight = norm,
                  .out = t,
                  .eps = a.eps,
                  .rope_positions = a.positions,
                  .rope_dim = a.rope_dim,
                  .rope_theta = a.rope_theta},
                 ctx);
  }
  kv_cache_write_ref({.k = a.k,
                      .v = a.v,
                      .positions = a.positions,
                      .block_table = a.block_table,
                      .k_cache = a.k_cache,
                      .v_cache = a.v_cache},
                     ctx);
}

}  // namespace tandem::kernels
