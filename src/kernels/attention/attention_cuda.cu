// CUDA gated paged attention for a batch of sequences: the host entry point and the split merge.
// The decode family (AttentionArgs::prefill false: decode and verify, at most
// kAttentionMaxDecodeTokens rows per sequence) runs the split-KV kernels of
// attention_decode_cuda.cu, which write per-(row, split) partials into the workspace, then
// attention_merge_kernel; the prefill family runs the flash-style kernel of
// attention_prefill_cuda.cu, which needs no scratch. Every launch covers all sequences of the
// call; grid sizes depend only on n_seqs, the rows bound, the block table's width and the GPU, so
// a captured graph replays any kv_len, row layout, block tables and (for the row's position) q.
// attention_merge_kernel: per row, merges the splits in increasing order with log-sum-exp, then
//   applies the sigmoid gate; its bits depend only on the row's partials and position.
#include <algorithm>
#include <cmath>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.cuh"
#include "kernels/diag_skip.h"

namespace tandem::kernels {

namespace {

using attn::AttnParams;

constexpr int kGranule = static_cast<int>(kAttentionSplitGranule);

// One block per (row, q head) of the call's rows bound, one thread per output dim. The row's split
// maxima and sums are staged in shared memory; with M = max of the maxima (exact, order-free), the
// output is sum_s o_s 2^(m_s - M) / sum_s l_s 2^(m_s - M), both sums in increasing split order.
// The partial outputs of different splits are independent loads, so they stream instead of
// chaining. Blocks past the call's rows leave before the wait (row_start is set before the step).
template <int kD>
__global__ void __launch_bounds__(kD) attention_merge_kernel(AttnParams p) {
  extern __shared__ float merge_s[];  // [max_splits] maxima, [max_splits] sums, [1] 1/L
  __shared__ int seq_sh;
  const int rel = static_cast<int>(blockIdx.x / p.hq), h = static_cast<int>(blockIdx.x % p.hq);
  const int e = threadIdx.x;
  const int row = p.row_start[0] + rel;  // absolute row
  if (e == 0) seq_sh = -1;
  __syncthreads();
  for (int s = e; s < p.n_seqs; s += kD) {  // the one sequence whose rows hold `row`
    if (p.row_start[s] <= row && row < p.row_start[s + 1]) seq_sh = s;
  }
  __syncthreads();
  if (seq_sh < 0) return attn::leave_early();
  const attn::SeqView sq = attn::seq_view(p, seq_sh);
  cuda::pdl_begin();  // launched with launch_pdl: wait for the split kernels
  const int64_t last = sq.last(row - sq.row0);
  const int n_splits = last < 0 ? 0 : static_cast<int>(last / kGranule + 1);
  const int64_t part = static_cast<int64_t>(rel) * p.hq + h;
  const float* ml = p.part_ml + part * p.max_splits * 2;
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
  const float* po = p.part_o + part * p.max_splits * kD + e;
  float o = 0.f;
#pragma unroll 8
  for (int s = 0; s < n_splits; ++s) o = __fmaf_rn(po[static_cast<int64_t>(s) * kD], f_sh[s], o);
  float y = o * merge_s[2 * p.max_splits];
  if (p.gate != nullptr) {
    y *= cuda::sigmoid(__bfloat162float(p.gate[row * p.g_s0 + h * p.g_s1 + e]));
  }
  p.out[row * p.out_s0 + h * p.out_s1 + e] = __float2bfloat16_rn(y);
}

template <int kD>
void launch_merge(const AttnParams& p, cudaStream_t s) {
  const size_t merge_smem = (2 * static_cast<size_t>(p.max_splits) + 1) * 4;
  TANDEM_CHECK(merge_smem <= 48 * 1024, "attention_cuda: {} splits exceed the merge kernel's limit",
               p.max_splits);
  cuda::launch_pdl(attention_merge_kernel<kD>, static_cast<unsigned>(int64_t{p.ws_rows} * p.hq), kD,
                   merge_smem, s, p);
  cuda::check_launch("attention_merge_kernel");
}

}  // namespace

bool attention_cuda_supports(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

void attention_cuda(const AttentionArgs& a, const ExecContext& ctx) {
  if (diag_skipped(DiagClass::kAttention)) return;  // timing diagnostic (diag_skip.h)
  const char* op = "attention";
  cuda::expect_cuda_dtype(a.q, DType::kBF16, op, "q");
  cuda::expect_cuda_dtype(a.out, DType::kBF16, op, "out");
  cuda::expect_cuda_dtype(a.k_cache, DType::kBF16, op, "k_cache");
  cuda::expect_cuda_dtype(a.v_cache, DType::kBF16, op, "v_cache");
  cuda::expect_cuda_dtype(a.block_tables, DType::kI32, op, "block_tables");
  cuda::expect_cuda_dtype(a.kv_len, DType::kI32, op, "kv_len");
  cuda::expect_cuda_dtype(a.seqs.row_start, DType::kI32, op, "row_start");
  cuda::expect_last_contiguous(a.q, op, "q");
  cuda::expect_last_contiguous(a.out, op, "out");
  expect_seq_layout(a.seqs, op);
  expect_per_seq(a.kv_len, a.seqs, op, "kv_len");
  expect_per_seq(a.block_tables, a.seqs, op, "block_tables");
  TANDEM_CHECK(
      a.block_tables.ndim() == 2 && a.kv_len.ndim() == 1 && a.kv_len.stride(0) == 1 &&
          a.seqs.row_start.stride(0) == 1,
      "attention_cuda: block_tables {} must be [n_seqs, max_blocks_per_seq], kv_len {} and "
      "row_start {} contiguous vectors",
      a.block_tables.describe(), a.kv_len.describe(), a.seqs.row_start.describe());
  const bool gated = a.gate.raw() != nullptr;
  if (gated) {
    cuda::expect_cuda_dtype(a.gate, DType::kBF16, op, "gate");
    cuda::expect_last_contiguous(a.gate, op, "gate");
    TANDEM_CHECK(a.gate.shape() == a.q.shape(), "attention_cuda: gate {} vs q {}",
                 a.gate.describe(), a.q.describe());
  }
  TANDEM_CHECK(a.q.ndim() == 3, "attention_cuda: q must be [n_rows, n_heads_q, head_dim], got {}",
               a.q.describe());
  const int64_t n_rows = a.q.dim(0), hq = a.q.dim(1), d = a.q.dim(2);
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
  TANDEM_CHECK(!gated || (a.gate.stride(0) % 2 == 0 && a.gate.stride(1) % 2 == 0 &&
                          reinterpret_cast<uintptr_t>(a.gate.raw()) % 4 == 0),
               "attention_cuda: gate strides {} must be even and gate 4-byte aligned (bf16 pairs)",
               shape_str(a.gate.strides()));
  const int64_t n_seqs = a.seqs.n_seqs, max_rows = a.seqs.max_rows;
  TANDEM_CHECK(n_seqs <= attn::kMaxSeqs && max_rows >= 0,
               "attention_cuda: {} sequences (at most {}), max_rows {}", n_seqs, attn::kMaxSeqs,
               max_rows);
  TANDEM_CHECK(a.prefill || max_rows <= kAttentionMaxDecodeTokens,
               "attention_cuda: the decode family takes at most {} rows per sequence, max_rows is "
               "{} (use prefill)",
               kAttentionMaxDecodeTokens, max_rows);
  const int64_t capacity = a.block_tables.dim(1) * block_size;
  TANDEM_CHECK(capacity < (int64_t{1} << 30) && a.k_cache.dim(0) * block_size < (int64_t{1} << 31),
               "attention_cuda: block tables {} x block size {} / cache {} beyond 32-bit positions",
               a.block_tables.describe(), block_size, a.k_cache.describe());
  // The call's rows are row_start[0] .. row_start[n_seqs] (consecutive sequences): at most
  // n_seqs x max_rows of them, and never more than q holds.
  const int64_t rows_bound = std::min(n_rows, n_seqs * max_rows);
  if (n_seqs == 0 || rows_bound == 0 || capacity == 0) return;
  AttnParams p{};
  p.q = a.q.data<const __nv_bfloat16>();
  p.gate = gated ? a.gate.data<const __nv_bfloat16>() : nullptr;
  p.q_s0 = a.q.stride(0), p.q_s1 = a.q.stride(1);
  p.g_s0 = gated ? a.gate.stride(0) : 0, p.g_s1 = gated ? a.gate.stride(1) : 0;
  p.k_cache = a.k_cache.data<const __nv_bfloat16>();
  p.v_cache = a.v_cache.data<const __nv_bfloat16>();
  p.block_tables = a.block_tables.data<const int32_t>();
  p.bt_stride = a.block_tables.stride(0);
  p.capacity = capacity;
  p.block_size = block_size;
  p.kv_len = a.kv_len.data<const int32_t>();
  p.row_start = a.seqs.row_start.data<const int32_t>();
  p.out = a.out.data<__nv_bfloat16>();
  p.out_s0 = a.out.stride(0), p.out_s1 = a.out.stride(1);
  p.n_seqs = static_cast<int>(n_seqs);
  p.ws_rows = static_cast<int>(rows_bound);
  p.hq = static_cast<int>(hq);
  p.hkv = static_cast<int>(hkv);
  p.group = static_cast<int>(hq / hkv);
  p.max_splits = static_cast<int>((capacity + kGranule - 1) / kGranule);
  p.scale_log2 = (a.scale > 0.f ? a.scale : 1.f / std::sqrt(static_cast<float>(d))) * attn::kLog2e;
  const cudaStream_t s = cuda::stream_of(ctx);
  if (a.prefill) return attn::launch_prefill(p, static_cast<int>(d), rows_bound, max_rows, s);

  // Decode family: partials of the call's rows, indexed by (row - row_start[0], q head, split).
  const int64_t need = attention_workspace_floats(rows_bound, hq, d, capacity);
  TANDEM_CHECK(
      a.workspace.raw() != nullptr && a.workspace.dtype() == DType::kF32 &&
          a.workspace.device() == Device::kCuda && a.workspace.is_contiguous() &&
          a.workspace.numel() >= need,
      "attention_cuda: the decode family needs an f32 cuda workspace of "
      "attention_workspace_floats(rows {}, heads {}, head_dim {}, kv {}) = {} floats, got {}",
      rows_bound, hq, d, capacity, need, a.workspace.describe());
  p.part_o = a.workspace.data<float>();
  p.part_ml = p.part_o + rows_bound * hq * p.max_splits * d;
  attn::launch_decode(p, static_cast<int>(d), max_rows, s);
  if (d == 64) launch_merge<64>(p, s);
  if (d == 128) launch_merge<128>(p, s);
  if (d == 256) launch_merge<256>(p, s);
}

}  // namespace tandem::kernels
