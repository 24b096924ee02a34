// CUDA attention inputs: one launch of (q rows + k rows) blocks over the rows of any number of
// sequences. A q block norms and rotates one (row, q head) in place at positions[row]; a k block
// does the same for one (row, kv head) with the k_norm weights and then, after a block barrier,
// copies that row and the matching v row to cache row kv.slots[row] (skipped when negative or
// beyond the cache), as kv_cache_write_kernel does. The row arithmetic is rms_norm_cuda.cuh's, so
// q and k are bit for bit the separate rms_norm launches (tested). Anything the vector row cannot
// take runs the three separate ops (attention_inputs_unfused).
#include "kernels/attention_inputs/attention_inputs.h"
#include "kernels/cuda_common.cuh"
#include "kernels/diag_skip.h"
#include "kernels/rms_norm/rms_norm_cuda.cuh"

namespace tandem::kernels {

namespace {

struct InputsParams {
  cuda::RowView q, k, v;
  cuda::AnyFloatPtr q_w, k_w;
  int64_t n_heads_q, n_heads_kv, dim;
  float eps;
  cuda::RopeParams rope;  // positions[row]: the RoPE position
  const int32_t* slots;   // [rows]: cache row of each row's K/V
  int64_t cache_rows;
  __nv_bfloat16 *k_cache, *v_cache;
};

__global__ void attention_inputs_kernel(InputsParams p, int64_t q_rows) {
  const bool is_q = blockIdx.x < q_rows;
  const int64_t idx = is_q ? blockIdx.x : blockIdx.x - q_rows;
  const int64_t heads = is_q ? p.n_heads_q : p.n_heads_kv;
  const int64_t r = idx / heads, h = idx % heads;
  const cuda::VecNormWeights wv = cuda::vec_norm_weights(is_q ? p.q_w : p.k_w, p.dim, true);
  cuda::pdl_begin();
  // The position and the k row's cache slot load first: their latency overlaps the row's.
  const int64_t pos = p.rope.positions[r];
  const int64_t cache_row = is_q ? -1 : p.slots[r];
  __nv_bfloat16* row = (is_q ? p.q : p.k).at(r, h);
  cuda::vec_norm_row(row, row, row, false, wv, p.dim, p.eps, p.rope, static_cast<float>(pos));
  if (cache_row < 0 || cache_row >= p.cache_rows) return;  // a q block, or a row not written
  __syncthreads();  // the block's stores of the rotated k row are visible to all its threads
  const int64_t slot = cache_row * p.n_heads_kv + h;
  const __nv_bfloat16* vs = p.v.at(r, h);
  for (int64_t i = threadIdx.x * 8; i < p.dim; i += blockDim.x * 8) {
    *reinterpret_cast<uint4*>(p.k_cache + slot * p.dim + i) =
        *reinterpret_cast<const uint4*>(row + i);
    *reinterpret_cast<uint4*>(p.v_cache + slot * p.dim + i) =
        *reinterpret_cast<const uint4*>(vs + i);
  }
}

bool rows_ok(const Tensor& t) {  // bf16 [rows, heads, dim], 16-byte loadable rows
  return t.dtype() == DType::kBF16 && t.ndim() == 3 && t.stride(-1) == 1 &&
         cuda::rows_16b_loadable(t);
}

// Whether one launch can do it; otherwise (or for shapes the ops reject) the separate ops run and
// report what is wrong with their own messages.
bool fusable(const AttentionInputsArgs& a) {
  const KvCacheWriteArgs& kv = a.kv;
  const int64_t d = a.q.ndim() == 3 ? a.q.dim(2) : 0;
  return rows_ok(a.q) && rows_ok(kv.k) && rows_ok(kv.v) && d % 8 == 0 &&
         d <= 8 * cuda::kVecChunks * 1024 && kv.k.dim(2) == d && kv.v.shape() == kv.k.shape() &&
         a.q.dim(0) == kv.k.dim(0) && a.rope_dim > 0 && a.rope_dim % 8 == 0 &&
         a.rope_dim <= std::min<int64_t>(d, cuda::kRopeMaxDim) &&
         a.positions.dtype() == DType::kI32 && a.positions.ndim() == 1 &&
         a.positions.dim(0) >= a.q.dim(0) && a.positions.stride(0) == 1 &&
         kv.slots.dtype() == DType::kI32 && kv.slots.ndim() == 1 && kv.slots.dim(0) >= a.q.dim(0) &&
         kv.slots.stride(0) == 1 && kv.k_cache.dtype() == DType::kBF16 &&
         kv.v_cache.dtype() == DType::kBF16 && kv.k_cache.is_contiguous() &&
         kv.v_cache.is_contiguous() && kv.k_cache.ndim() == 4 &&
         kv.k_cache.shape() == kv.v_cache.shape() && kv.k_cache.dim(2) == kv.k.dim(1) &&
         kv.k_cache.dim(3) == d && cuda::aligned16(kv.k_cache.raw()) &&
         cuda::aligned16(kv.v_cache.raw()) && a.q_norm.numel() == d && a.k_norm.numel() == d;
}

}  // namespace

void attention_inputs_cuda(const AttentionInputsArgs& a, const ExecContext& ctx) {
  if (diag_skipped(DiagClass::kAttention)) return;  // timing diagnostic (diag_skip.h)
  if (!fusable(a)) return attention_inputs_unfused(a, ctx);
  const char* op = "attention_inputs";
  const KvCacheWriteArgs& kv = a.kv;
  for (const auto& [t, name] :
       {std::pair{&a.q, "q"}, std::pair{&kv.k, "k"}, std::pair{&kv.v, "v"},
        std::pair{&kv.k_cache, "k_cache"}, std::pair{&kv.v_cache, "v_cache"},
        std::pair{&a.positions, "positions"}, std::pair{&kv.slots, "slots"}}) {
    cuda::expect_cuda(*t, op, name);
  }
  const auto view = [](const Tensor& t) {
    return cuda::RowView{t.data<__nv_bfloat16>(), t.stride(0), t.stride(1)};
  };
  const int64_t n = a.q.dim(0), hq = a.q.dim(1), hkv = kv.k.dim(1), d = a.q.dim(2);
  if (n == 0) return;
  const InputsParams p{view(a.q),
                       view(kv.k),
                       view(kv.v),
                       cuda::any_float(a.q_norm, op, "q_norm"),
                       cuda::any_float(a.k_norm, op, "k_norm"),
                       hq,
                       hkv,
                       d,
                       a.eps,
                       {a.positions.data<const int32_t>(), a.rope_dim / 2, a.rope_theta},
                       kv.slots.data<const int32_t>(),
                       kv.k_cache.dim(0) * kv.k_cache.dim(1),
                       kv.k_cache.data<__nv_bfloat16>(),
                       kv.v_cache.data<__nv_bfloat16>()};
  cuda::launch_pdl(attention_inputs_kernel, static_cast<unsigned>(n * (hq + hkv)),
                   cuda::vec_norm_threads(d), 0, cuda::stream_of(ctx), p, n * hq);
  cuda::check_launch("attention_inputs_kernel");
}

}  // namespace tandem::kernels
