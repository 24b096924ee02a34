// CPU reference for the paged KV cache write.
#include <cstring>

#include "kernels/kv_cache/kv_cache.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

void kv_cache_write_ref(const KvCacheWriteArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.k, "kv_cache_write.k");
  ref::expect_f32_act(a.v, "kv_cache_write.v");
  const int64_t n = a.k.dim(0), heads = a.k.dim(1), d = a.k.dim(2);
  const int64_t cache_rows = a.k_cache.dim(0) * a.k_cache.dim(1);
  TANDEM_CHECK(a.slots.dtype() == DType::kI32 && a.slots.dim(0) >= n,
               "kv_cache_write: slots must be i32 [n_rows = {}], got {}", n, a.slots.describe());
  const int32_t* slots = a.slots.data<const int32_t>();
  for (int64_t t = 0; t < n; ++t) {
    if (slots[t] < 0) continue;
    TANDEM_CHECK(slots[t] < cache_rows, "kv_cache_write: slot {} beyond the cache ({} rows)",
                 slots[t], cache_rows);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = (static_cast<int64_t>(slots[t]) * heads + h) * d;
      std::memcpy(a.k_cache.data<float>() + at,
                  a.k.data<const float>() + t * a.k.stride(0) + h * a.k.stride(1), d * 4);
      std::memcpy(a.v_cache.data<float>() + at,
                  a.v.data<const float>() + t * a.v.stride(0) + h * a.v.stride(1), d * 4);
    }
  }
}

}  // namespace tandem::kernels
