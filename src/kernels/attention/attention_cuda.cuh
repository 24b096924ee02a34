// Internals shared by the CUDA attention kernels (attention_cuda.cu: entry point and split merge;
// attention_decode_cuda.cu: decode/verify split-KV; attention_prefill_cuda.cu: flash-style
// prefill): launch parameters, the mma.sync / ldmatrix / cp.async wrappers and the causal limits.
// Not an interface for other ops.
#pragma once

#include <cstdint>

#include "kernels/cuda_common.cuh"

namespace tandem::kernels::attn {

constexpr float kLog2e = 1.4426950408889634f;

struct AttnParams {
  const __nv_bfloat16 *q, *gate;  // already offset to the launch's first token
  int64_t q_s0, q_s1, g_s0, g_s1;
  const __nv_bfloat16 *k_cache, *v_cache;
  const int32_t* block_table;
  int64_t capacity, block_size;
  const int32_t* kv_len;
  __nv_bfloat16* out;
  int64_t out_s0, out_s1;
  float* part_o;            // [rows, max_splits, d] (decode/verify only)
  float* part_ml;           // [rows, max_splits, 2]: max (log2 domain) and sum
  int64_t n_total, q0, nq;  // all query tokens of the call, first token and tokens of this launch
  int hq, hkv, group, max_splits;
  float scale_log2;  // softmax scale times log2(e): scores live in the log2 domain
};

__device__ __forceinline__ int64_t device_kv_len(const AttnParams& p) {
  const int64_t l = p.kv_len[0];
  return l < p.capacity ? l : p.capacity;
}
// Last position visible to local token t (causal, bottom-right aligned).
__device__ __forceinline__ int64_t last_pos(const AttnParams& p, int64_t kv_len, int64_t t) {
  return kv_len - p.n_total + p.q0 + t;
}
// Cache slot of position pos (block table lookup).
__device__ __forceinline__ int64_t slot_of(const AttnParams& p, int64_t pos) {
  return static_cast<int64_t>(p.block_table[pos / p.block_size]) * p.block_size +
         pos % p.block_size;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
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

// Decode/verify (attention_decode_cuda.cu): writes the per-split partials; prefill
// (attention_prefill_cuda.cu): writes the output.
void launch_decode(const AttnParams& p, int head_dim, cudaStream_t s);
void launch_prefill(const AttnParams& p, int head_dim, cudaStream_t s);

}  // namespace tandem::kernels::attn
