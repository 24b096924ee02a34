// Paged KV cache write: the K/V rows of the step's tokens go to their slots,
//   slot(pos) = block_table[pos / block_size] * block_size + pos % block_size.
// Rejected draft positions are simply overwritten by a later step (DESIGN.md inv. 3).
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct KvCacheWriteArgs {
  Tensor k;            // act [n_tokens, n_heads_kv, head_dim] (strided view allowed)
  Tensor v;            // act [n_tokens, n_heads_kv, head_dim]
  Tensor positions;    // i32 [n_tokens]
  Tensor block_table;  // i32 [max_blocks] for this sequence
  Tensor k_cache;      // act [n_blocks, block_size, n_heads_kv, head_dim]
  Tensor v_cache;      // act [n_blocks, block_size, n_heads_kv, head_dim]
};

void kv_cache_write_ref(const KvCacheWriteArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void kv_cache_write_cuda(const KvCacheWriteArgs& a, const ExecContext& ctx);
#endif

inline void kv_cache_write(const KvCacheWriteArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return kv_cache_write_cuda(a, ctx);
#endif
  kv_cache_write_ref(a, ctx);
}

}  // namespace tandem::kernels
