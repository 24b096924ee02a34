// CUDA gated paged attention: the host entry point and the split merge. Decode and verify
// (n_tokens <= kAttentionMaxDecodeTokens) run the split-KV kernels of attention_decode_cuda.cu,
// which write per-(row, split) partials, then attention_merge_kernel; longer calls run the
// flash-style prefill kernel (attention_prefill_cuda.cu), which needs no scratch.
// attention_merge_kernel: per row, merges the splits in increasing order with log-sum-exp, then
//   applies the sigmoid gate; its bits depend only on the row's partials and position.
#include <algorithm>
#include <cmath>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.cuh"

namespace tandem::kernels {

namespace {

using attn::AttnParams;

constexpr int kGranule = static_cast<int>(kAttentionSplitGranule);
constexpr int64_t kFallbackWorkspaceBytes = int64_t{256} << 20;

// One block per (token, q head) row, one thread per output dim. The row's split maxima and sums
// are staged in shared memory; with M = max of the maxima (exact, order-free), the output is
// sum_s o_s 2^(m_s - M) / sum_s l_s 2^(m_s - M), both sums in increasing split order. The partial
// outputs of different splits are independent loads, so they stream instead of chaining.
template <int kD>
__global__ void __launch_bounds__(kD) attention_merge_kernel(AttnParams p) {
  cuda::pdl_begin();                  // launched with launch_pdl: wait for the predecessor first
  extern __shared__ float merge_s[];  // [max_splits] maxima, [max_splits] sums, [1] 1/L
  const int64_t row = blockIdx.x, t = row / p.hq, h = row % p.hq;
  const int e = threadIdx.x;
  const int64_t kv_len = attn::device_kv_len(p);
  const int64_t last = attn::last_pos(p, kv_len, t);
  const int n_splits = last < 0 ? 0 : static_cast<int>(last / kGranule + 1);
  const float* ml = p.part_ml + row * p.max_splits * 2;
  float* m_sh = merge_s;
  float* f_sh = merge_s + p.max_splits;
  for (int s = e; s < n_splits; s += kD) {  // parallel loads; the arithmetic below is serial
    m_sh[s] = ml[2 * s];
    f_sh[s] = ml[2 * s + 1];
  }
  __syncthreads();
  if (e == 0) {
    float m = -INFINITY;
    for (int s = 0; s < n_splits; ++s) m = f_sh[s] > 0.f ? fmaxf(m, m_sh[s]) : m;
    float l = 0.f;
    for (int s = 0; s < n_splits; ++s) {
      const float ls = f_sh[s];
      const float f = ls > 0.f ? exp2f(m_sh[s] - m) : 0.f;
      f_sh[s] = f;
      l = __fmaf_rn(ls, f, l);
    }
    merge_s[2 * p.max_splits] = l > 0.f ? 1.f / l : 0.f;
  }
  __syncthreads();
  const float* po = p.part_o + row * p.max_splits * kD + e;
  float o = 0.f;
#pragma unroll 8
  for (int s = 0; s < n_splits; ++s) o = __fmaf_rn(po[static_cast<int64_t>(s) * kD], f_sh[s], o);
  float y = o * merge_s[2 * p.max_splits];
  if (p.gate != nullptr) y *= cuda::sigmoid(__bfloat162float(p.gate[t * p.g_s0 + h * p.g_s1 + e]));
  p.out[t * p.out_s0 + h * p.out_s1 + e] = __float2bfloat16_rn(y);
}

template <int kD>
void launch(const AttnParams& p, cudaStream_t s) {
  attn::launch_decode(p, kD, s);
  const size_t merge_smem = (2 * static_cast<size_t>(p.max_splits) + 1) * 4;
  auto* merge = attention_merge_kernel<kD>;
  TANDEM_CHECK(merge_smem <= 48 * 1024, "attention_cuda: {} splits exceed the merge kernel's limit",
               p.max_splits);
  cuda::launch_pdl(merge, static_cast<unsigned>(p.nq * p.hq), kD, merge_smem, s, p);
  cuda::check_launch("attention_merge_kernel");
}

}  // namespace
bool attention_cuda_supports(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

void attention_cuda(const AttentionArgs& a, const ExecContext& ctx) {
  const char* op = "attention";
  cuda::expect_cuda_dtype(a.q, DType::kBF16, op, "q");
  cuda::expect_cuda_dtype(a.out, DType::kBF16, op, "out");
  cuda::expect_cuda_dtype(a.k_cache, DType::kBF16, op, "k_cache");
  cuda::expect_cuda_dtype(a.v_cache, DType::kBF16, op, "v_cache");
  cuda::expect_cuda_dtype(a.block_table, DType::kI32, op, "block_table");
  cuda::expect_cuda_dtype(a.kv_len, DType::kI32, op, "kv_len");
  cuda::expect_last_contiguous(a.q, op, "q");
  cuda::expect_last_contiguous(a.out, op, "out");
  const bool gated = a.gate.raw() != nullptr;
  if (gated) {
    cuda::expect_cuda_dtype(a.gate, DType::kBF16, op, "gate");
    cuda::expect_last_contiguous(a.gate, op, "gate");
    TANDEM_CHECK(a.gate.shape() == a.q.shape(), "attention_cuda: gate {} vs q {}",
                 a.gate.describe(), a.q.describe());
  }
  const int64_t n = a.q.dim(0), hq = a.q.dim(1), d = a.q.dim(2);
  const int64_t block_size = a.k_cache.dim(1), hkv = a.k_cache.dim(2);
  TANDEM_CHECK(a.k_cache.is_contiguous() && a.v_cache.is_contiguous() &&
                   a.k_cache.shape() == a.v_cache.shape() && a.k_cache.dim(3) == d &&
                   hq % hkv == 0 && a.out.shape() == a.q.shape(),
               "attention_cuda: q {} out {} k_cache {} v_cache {} do not agree", a.q.describe(),
               a.out.describe(), a.k_cache.describe(), a.v_cache.describe());
  TANDEM_CHECK(attention_cuda_supports(d),
               "attention_cuda: head_dim {} unsupported for dtype bf16 on cuda (64, 128, 256)", d);
  TANDEM_CHECK(cuda::rows_16b_loadable(a.q),
               "attention_cuda: q strides {} must be multiples of 8 and q 16-byte aligned",
               shape_str(a.q.strides()));
  if (n == 0) return;
  AttnParams p{};
  p.q_s0 = a.q.stride(0), p.q_s1 = a.q.stride(1);
  p.g_s0 = gated ? a.gate.stride(0) : 0, p.g_s1 = gated ? a.gate.stride(1) : 0;
  p.k_cache = a.k_cache.data<const __nv_bfloat16>();
  p.v_cache = a.v_cache.data<const __nv_bfloat16>();
  p.block_table = a.block_table.data<const int32_t>();
  p.block_size = block_size;
  p.capacity = a.block_table.dim(0) * block_size;
  p.kv_len = a.kv_len.data<const int32_t>();
  p.out_s0 = a.out.stride(0), p.out_s1 = a.out.stride(1);
  p.n_total = n;
  p.hq = static_cast<int>(hq);
  p.hkv = static_cast<int>(hkv);
  p.group = static_cast<int>(hq / hkv);
  p.max_splits = static_cast<int>((p.capacity + kGranule - 1) / kGranule);
  p.scale_log2 = (a.scale > 0.f ? a.scale : 1.f / std::sqrt(static_cast<float>(d))) * attn::kLog2e;
  const cudaStream_t s = cuda::stream_of(ctx);
  if (n > kAttentionMaxDecodeTokens) {  // prefill: its own kernel, no scratch (attention.h)
    p.q0 = 0;
    p.nq = n;
    p.q = a.q.data<const __nv_bfloat16>();
    p.gate = gated ? a.gate.data<const __nv_bfloat16>() : nullptr;
    p.out = a.out.data<__nv_bfloat16>();
    attn::launch_prefill(p, static_cast<int>(d), s);
    return;
  }
  const int64_t floats_per_token = attention_workspace_floats(1, hq, d, p.capacity);
  float* ws = nullptr;
  int64_t ws_floats = 0;
  void* owned = nullptr;
  if (a.workspace.raw() != nullptr) {
    cuda::expect_cuda_dtype(a.workspace, DType::kF32, op, "workspace");
    ws = a.workspace.data<float>();
    ws_floats = a.workspace.numel();
  } else {
    ws_floats =
        std::min(n * floats_per_token, std::max(floats_per_token, kFallbackWorkspaceBytes / 4));
    TANDEM_CUDA_CHECK(cudaMallocAsync(&owned, static_cast<size_t>(ws_floats) * 4, s));
    ws = static_cast<float*>(owned);
  }
  TANDEM_CHECK(ws_floats >= floats_per_token,
               "attention_cuda: workspace {} holds fewer than the {} floats one token needs",
               a.workspace.describe(), floats_per_token);
  // With a workspace sized by attention_workspace_floats(n, ...) this is one launch; a smaller one
  // runs the tokens in chunks, which changes no row's bits (rows are independent).
  const int64_t chunk = std::min(n, ws_floats / floats_per_token);
  for (int64_t q0 = 0; q0 < n; q0 += chunk) {
    p.q0 = q0;
    p.nq = std::min(chunk, n - q0);
    p.q = a.q.data<const __nv_bfloat16>() + q0 * p.q_s0;
    p.gate = gated ? a.gate.data<const __nv_bfloat16>() + q0 * p.g_s0 : nullptr;
    p.out = a.out.data<__nv_bfloat16>() + q0 * p.out_s0;
    p.part_o = ws;
    p.part_ml = ws + p.nq * hq * p.max_splits * d;
    if (d == 64) launch<64>(p, s);
    if (d == 128) launch<128>(p, s);
    if (d == 256) launch<256>(p, s);
  }
  if (owned != nullptr) TANDEM_CUDA_CHECK(cudaFreeAsync(owned, s));
}

}  // namespace tandem::kernels
