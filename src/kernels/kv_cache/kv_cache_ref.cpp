// CPU reference for the paged KV cache write.
#include <cstring>

#include "kernels/kv_cache/kv_cache.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

void kv_cache_write_ref(const KvCacheWriteArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.k, "kv_cache_write.k");
  ref::expect_f32_act(a.v, "kv_cache_write.v");
  const int64_t n = a.k.dim(0), heads = a.k.dim(1), d = a.k.dim(2);
  const int64_t block_size = a.k_cache.dim(1), max_blocks = a.block_table.dim(0);
  const int32_t* pos = a.positions.data<const int32_t>();
  const int32_t* table = a.block_table.data<const int32_t>();
  for (int64_t t = 0; t < n; ++t) {
    TANDEM_CHECK(pos[t] >= 0 && pos[t] / block_size < max_blocks,
                 "kv_cache_write: position {} beyond the block table ({} blocks of {})", pos[t],
                 max_blocks, block_size);
    const int64_t block = table[pos[t] / block_size], off = pos[t] % block_size;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t slot = ((block * block_size + off) * heads + h) * d;
      std::memcpy(a.k_cache.data<float>() + slot,
                  a.k.data<const float>() + t * a.k.stride(0) + h * a.k.stride(1), d * 4);
      std::memcpy(a.v_cache.data<float>() + slot,
                  a.v.data<const float>() + t * a.v.stride(0) + h * a.v.stride(1), d * 4);
    }
  }
}

}  // namespace tandem::kernels
