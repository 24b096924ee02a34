// Internals shared by the CUDA attention kernels (attention_cuda.cu: entry point and split merge;
// attention_decode_cuda.cu: decode/verify split-KV; attention_prefill_cuda.cu: flash-style
// prefill): launch parameters, the per-sequence view and work-list helpers of a batched call, the
// mma.sync / ldmatrix / cp.async wrappers. Not an interface for other ops.
#pragma once

#include <cstdint>

#include "kernels/cuda_common.cuh"

namespace tandem::kernels::attn {

constexpr float kLog2e = 1.4426950408889634f;

struct AttnParams {
  const __nv_bfloat16 *q, *gate;  // row 0 of the q and gate tensors (row indices are absolute)
  int64_t q_s0, q_s1, g_s0, g_s1;
  const __nv_bfloat16 *k_cache, *v_cache;
  const int32_t* block_tables;  // [n_seqs, bt_stride]: row s holds sequence s's pages
  int64_t bt_stride;
  int64_t capacity, block_size;  // capacity: positions one block-table row covers
  const int32_t* kv_len;         // [n_seqs]
  const int32_t* row_start;      // [n_seqs + 1]: sequence s owns rows [row_start[s], [s + 1])
  __nv_bfloat16* out;
  int64_t out_s0, out_s1;
  // Decode family: per-(row, q head, split) partials; a row's index here is its offset from the
  // call's first row, row - row_start[0] (< ws_rows), so a sub-batch needs no scratch for the
  // rows of the step it does not own.
  float* part_o;   // [ws_rows, hq, max_splits, d]
  float* part_ml;  // [ws_rows, hq, max_splits, 2]: max (log2 domain) and sum
  int n_seqs, ws_rows;
  int hq, hkv, group, max_splits;
  int row_block;     // (row, q head) pairs of one sequence and kv head per work item
  int tile_budget;   // decode: the most work items the tile kernel takes (one wave of its grid)
  float scale_log2;  // softmax scale times log2(e): scores live in the log2 domain
};

// The most sequences one call may carry: the kernels keep a prefix sum over them in shared memory.
constexpr int kMaxSeqs = 2048;
// Shared memory one block may use on sm_90 (dynamic plus static).
constexpr size_t kSmemPerBlock = 227 * 1024;
// Shared-memory bytes of that prefix sum (n_seqs + 1 ints, rounded to 16 bytes).
constexpr size_t seq_prefix_bytes(int64_t n_seqs) {
  return static_cast<size_t>((n_seqs + 1 + 3) / 4 * 16);
}

// One sequence of the call as the kernels see it (every field read on the device).
struct SeqView {
  int row0;    // absolute index of its first row
  int n;       // its rows (0 when row_start is not increasing)
  int rel0;    // row0 - row_start[0]: its first row's index in the decode partials
  int64_t kv;  // its positions, clamped to [0, capacity]
  const int32_t* table;
  // Last position row t sees (causal, bottom-right aligned); negative: none.
  __device__ __forceinline__ int64_t last(int t) const { return kv - n + t; }
};

__device__ __forceinline__ SeqView seq_view(const AttnParams& p, int s) {
  SeqView v;
  v.row0 = p.row_start[s];
  v.n = max(0, p.row_start[s + 1] - v.row0);
  v.rel0 = v.row0 - p.row_start[0];
  const int64_t l = p.kv_len[s];
  v.kv = l < 0 ? 0 : (l < p.capacity ? l : p.capacity);
  v.table = p.block_tables + s * p.bt_stride;
  return v;
}

// Exclusive prefix sums of count(s), the work items of sequence s, over the call's sequences into
// prefix[0..n_seqs] (shared memory), computed by the whole block: every thread must call it, and
// every thread gets the total. Integer sums, so the order of the scan is immaterial. The kernels
// call it before the PDL wait: it reads only the step's metadata, which the host writes before
// the step (docs/cuda.md).
template <typename Count>
__device__ __forceinline__ int seq_prefix(int n_seqs, int* prefix, Count count) {
  __shared__ int warp_total[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  if (threadIdx.x == 0) prefix[0] = 0;
  int carry = 0;
  for (int base = 0; base < n_seqs; base += blockDim.x) {
    const int s = base + static_cast<int>(threadIdx.x);
    int x = s < n_seqs ? count(s) : 0;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {  // inclusive scan within the warp
      const int y = __shfl_up_sync(0xffffffffu, x, off);
      if (lane >= off) x += y;
    }
    if (lane == 31) warp_total[warp] = x;
    __syncthreads();
    int before = carry, total = carry;
    for (int w = 0; w < n_warps; ++w) {
      before += w < warp ? warp_total[w] : 0;
      total += warp_total[w];
    }
    if (s < n_seqs) prefix[s + 1] = before + x;
    carry = total;
    __syncthreads();  // warp_total is rewritten by the next round
  }
  __syncthreads();  // prefix[0] (and, without a round, nothing else) is visible
  return carry;
}

// The sequence that work item `item` (0 <= item < prefix[n_seqs]) belongs to: the s with
// prefix[s] <= item < prefix[s + 1] (sequences without items are never chosen).
__device__ __forceinline__ int find_seq(const int* prefix, int n_seqs, int item) {
  int lo = 0, hi = n_seqs;  // prefix[lo] <= item < prefix[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (prefix[mid] <= item) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// A block with nothing to do leaves before the PDL wait (it has read only the step's metadata).
// The next kernel waits only for this grid, so this grid must still finish after its predecessor,
// and must trigger the next launch only after that predecessor's wait: block (0, 0, 0) always
// waits (pdl_begin) before it leaves.
__device__ __forceinline__ void leave_early() {
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) cuda::pdl_begin();
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Makes the compiler forget what it knows about these pointers (no instruction): the persistent
// decode loops map their shared-memory arrays into the cluster ranks' once per item, so the one
// 64-bit pointer per rank is not hoisted out of the item loop and kept alive across the tile math.
template <typename T>
__device__ __forceinline__ void opaque_one(T*& p) {
  asm volatile("" : "+l"(p));
}
template <typename... T>
__device__ __forceinline__ void opaque(T*&... p) {
  (opaque_one(p), ...);
}

// 16-byte async copy; valid == false zero-fills the destination (src is not read).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
// cp.async of one K and one V tile of kTileN positions into rows of kD + 8 elements, shared by
// kThreads threads; slot -1 (a position outside the range) reads as zeros.
template <int kD, int kThreads, int kTileN>
__device__ __forceinline__ void load_kv_tile(__nv_bfloat16* k_dst, __nv_bfloat16* v_dst,
                                             const AttnParams& p, int hk, const int32_t* slots) {
  constexpr int kChunks = kD / 8;
  for (int c = threadIdx.x; c < kTileN * kChunks; c += kThreads) {
    const int j = c / kChunks, e = (c % kChunks) * 8, slot = slots[j];
    const int64_t off = slot < 0 ? 0 : (static_cast<int64_t>(slot) * p.hkv + hk) * kD + e;
    cp_async16(k_dst + j * (kD + 8) + e, p.k_cache + off, slot >= 0);
    cp_async16(v_dst + j * (kD + 8) + e, p.v_cache + off, slot >= 0);
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// D = A B + D, m16n8k16, bf16 inputs, f32 accumulators. Every output element is computed from its
// own A row and B column only, so a query row's bits never depend on the other rows of the tile.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t& r0, uint32_t& r1, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// A 16x16 bf16 A-operand (or two 8x16 B n-tiles) from a row-major tile: lane l addresses row
// (l % 16) and column col + (l / 16) * 8.
__device__ __forceinline__ const __nv_bfloat16* a_frag_addr(const __nv_bfloat16* base, int ld,
                                                            int col, int lane) {
  return base + (lane & 15) * ld + col + (lane >> 4) * 8;
}

// Online-softmax step for one row in the log2 domain: returns the factor that rescales the old
// sum and output. A row whose scores so far are all masked keeps m = -inf and factor 1, and its
// probabilities are exact zeros, so fully masked tiles leave its state bit-for-bit unchanged.
__device__ __forceinline__ float softmax_rescale(float& m, float tile_max, float& m_use) {
  const float m_new = fmaxf(m, tile_max);
  const float alpha = m_new == -INFINITY ? 1.f : exp2f(m - m_new);
  m = m_new;
  m_use = m_new == -INFINITY ? 0.f : m_new;
  return alpha;
}

// Decode/verify (attention_decode_cuda.cu): writes the per-split partials of the call's rows;
// prefill (attention_prefill_cuda.cu): writes the output. max_rows (the host's bound on one
// sequence's rows) and rows_bound (on the call's rows) size the grids; no per-step value is read
// on the host.
void launch_decode(AttnParams p, int head_dim, int64_t max_rows, cudaStream_t s);
void launch_prefill(const AttnParams& p, int head_dim, int64_t rows_bound, int64_t max_rows,
                    cudaStream_t s);

}  // namespace tandem::kernels::attn
