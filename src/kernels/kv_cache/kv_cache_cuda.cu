// CUDA paged KV cache write: one block per (row, kv head) copies the bf16 K and V rows into cache
// row slots[row] (block * block_size + offset, planned by the host). The slots are read on the
// device (graph-safe); a negative slot, or one beyond the cache, writes nothing.
#include "kernels/cuda_common.cuh"
#include "kernels/kv_cache/kv_cache.h"

namespace tandem::kernels {

namespace {

__global__ void kv_cache_write_kernel(const __nv_bfloat16* k, int64_t k_s0, int64_t k_s1,
                                      const __nv_bfloat16* v, int64_t v_s0, int64_t v_s1,
                                      const int32_t* slots, int64_t cache_rows, int64_t heads,
                                      int64_t d, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  const int64_t t = blockIdx.x / heads, h = blockIdx.x % heads;
  const int64_t slot = slots[t];
  if (slot < 0 || slot >= cache_rows) return;
  const int64_t at = (slot * heads + h) * d;
  const __nv_bfloat16* ks = k + t * k_s0 + h * k_s1;
  const __nv_bfloat16* vs = v + t * v_s0 + h * v_s1;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    k_cache[at + i] = ks[i];
    v_cache[at + i] = vs[i];
  }
}

}  // namespace

void kv_cache_write_cuda(const KvCacheWriteArgs& a, const ExecContext& ctx) {
  cuda::expect_cuda_dtype(a.k, DType::kBF16, "kv_cache_write", "k");
  cuda::expect_cuda_dtype(a.v, DType::kBF16, "kv_cache_write", "v");
  cuda::expect_cuda_dtype(a.k_cache, DType::kBF16, "kv_cache_write", "k_cache");
  cuda::expect_cuda_dtype(a.v_cache, DType::kBF16, "kv_cache_write", "v_cache");
  cuda::expect_cuda_dtype(a.slots, DType::kI32, "kv_cache_write", "slots");
  cuda::expect_last_contiguous(a.k, "kv_cache_write", "k");
  cuda::expect_last_contiguous(a.v, "kv_cache_write", "v");
  const int64_t n = a.k.dim(0), heads = a.k.dim(1), d = a.k.dim(2);
  TANDEM_CHECK(a.k_cache.is_contiguous() && a.v_cache.is_contiguous() && a.k_cache.ndim() == 4 &&
                   a.k_cache.shape() == a.v_cache.shape() && a.k_cache.dim(2) == heads &&
                   a.k_cache.dim(3) == d && a.v.shape() == a.k.shape(),
               "kv_cache_write_cuda: k {} v {} k_cache {} v_cache {} do not agree", a.k.describe(),
               a.v.describe(), a.k_cache.describe(), a.v_cache.describe());
  TANDEM_CHECK(a.slots.ndim() == 1 && a.slots.dim(0) >= n && a.slots.stride(0) == 1,
               "kv_cache_write_cuda: slots must be i32 [n_rows = {}], got {}", n,
               a.slots.describe());
  if (n * heads == 0) return;
  cuda::launch_pdl(kv_cache_write_kernel, static_cast<unsigned>(n * heads), 128, 0,
                   cuda::stream_of(ctx), a.k.data<const __nv_bfloat16>(), a.k.stride(0),
                   a.k.stride(1), a.v.data<const __nv_bfloat16>(), a.v.stride(0), a.v.stride(1),
                   a.slots.data<const int32_t>(), a.k_cache.dim(0) * a.k_cache.dim(1), heads, d,
                   a.k_cache.data<__nv_bfloat16>(), a.v_cache.data<__nv_bfloat16>());
  cuda::check_launch("kv_cache_write_kernel");
}

}  // namespace tandem::kernels
