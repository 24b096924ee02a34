// Paged KV cache write: the K/V rows of a step go to their cache slots,
//   slots[t] = block * block_size + offset, the physical row of row t's position in its
//   sequence's pages (the host computes it from the block table when it plans the step);
//   a row with slots[t] < 0 is not written.
// Rejected draft positions are simply overwritten by a later step (DESIGN.md inv. 3).
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct KvCacheWriteArgs {
  Tensor k;        // act [n_rows, n_heads_kv, head_dim] (strided view allowed)
  Tensor v;        // act [n_rows, n_heads_kv, head_dim]
  Tensor slots;    // i32 [n_rows]
  Tensor k_cache;  // act [n_blocks, block_size, n_heads_kv, head_dim]
  Tensor v_cache;  // act [n_blocks, block_size, n_heads_kv, head_dim]
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
