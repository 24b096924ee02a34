// CUDA gated paged attention, prefill family (AttentionArgs::prefill): flash-attention style, one
// pass over the KV with an online softmax and no scratch, for a batch of sequences of any rows.
// Decode and verify rows never come here (attention_cuda.cu).
// One CTA per (block of 16 * kWarps (row, q head) pairs of one sequence, kv head), so K/V tiles
// are shared by the whole GQA group. Warp w owns pairs 16w..16w+15 and keeps their output
// (16 x d f32) in registers. K and V tiles of 64 positions stream through two double-buffered
// shared-memory stages (cp.async); S = Q K^T and O += P V are mma.sync m16n8k16 with P taken
// straight from the S accumulators. The grid is a bound on the call's row blocks (host-known
// sequences and rows); each CTA finds its (sequence, row block) through a prefix sum over the
// sequences' rows, the last row blocks (most work) of the last sequences first.
// Row invariance among prefill calls: tiles sit at fixed multiples of 64 positions from 0, every
// per-row reduction has a fixed order, and tiles past a row's causal limit are exact no-ops, so a
// row's bits depend only on its inputs and position (not bit-equal to the decode kernel's rows).
#include <algorithm>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.cuh"

namespace tandem::kernels::attn {

namespace {

constexpr int kTileN = 64;

// 2^x by the hardware approximation (rel. error ~2^-22, 2^-inf = +0): the prefill kernel's exp
// count is large enough for the library exp2f's denormal handling to show.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int kD, int kWarps>
struct PrefillSmem {
  static constexpr int kRows = 16 * kWarps;
  static constexpr int kLd = kD + 8;  // bf16 row stride: conflict-free ldmatrix
  static constexpr size_t kTile = size_t{kTileN} * kLd * 2;
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + size_t{kRows} * kLd * 2;  // [2][kTileN][kLd]
  static constexpr size_t kV = kK + 2 * kTile;                // [2][kTileN][kLd]
  static constexpr size_t kSlot = kV + 2 * kTile;             // [2][kTileN] cache slots
  static constexpr size_t kPrefix = kSlot + 2 * kTileN * 4;   // then seq_prefix_bytes(n_seqs)
  static_assert(kPrefix % 16 == 0, "the prefix sum starts 16-byte aligned");
};

// Cache slots of positions tile*64 .. tile*64+63 (-1 past `last`, the block's last visible
// position), computed once per tile so that the loads below need no division or table lookup.
__device__ __forceinline__ void tile_slots(int32_t* dst, const AttnParams& p, const int32_t* table,
                                           int tile, int last) {
  if (threadIdx.x < kTileN) {
    const int pos = tile * kTileN + threadIdx.x, bs = static_cast<int>(p.block_size);
    dst[threadIdx.x] = pos <= last ? table[pos / bs] * bs + pos % bs : -1;
  }
}

template <int kD, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, 1) attention_prefill_kernel(AttnParams p) {
  using L = PrefillSmem<kD, kWarps>;
  constexpr int kThreads = kWarps * 32, kRows = L::kRows, kLd = L::kLd;
  constexpr int kKSteps = kD / 16, kNT = kD / 8, kST = kTileN / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kQ);
  auto* k_s = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kK);
  auto* v_s = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kV);
  auto* slot_s = reinterpret_cast<int32_t*>(smem_raw + L::kSlot);
  auto* prefix = reinterpret_cast<int*>(smem_raw + L::kPrefix);

  const int n_items = seq_prefix(p.n_seqs, prefix, [&](int s) {
    const int rows = seq_view(p, s).n * p.group;
    return (rows + kRows - 1) / kRows;
  });
  const int item = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // latest rows first
  if (item >= n_items) return;
  const int seq = find_seq(prefix, p.n_seqs, item);
  const SeqView sq = seq_view(p, seq);
  const int hk = blockIdx.y;
  const int rows_total = sq.n * p.group;
  const int row0 = (item - prefix[seq]) * kRows;
  const int n_rows = min(kRows, rows_total - row0);
  const int first_last = static_cast<int>(sq.last(row0 / p.group));
  const int block_last = static_cast<int>(sq.last((row0 + n_rows - 1) / p.group));
  const int n_tiles = block_last < 0 ? 0 : (block_last + kTileN) / kTileN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c4 = lane & 3;

  for (int c = threadIdx.x; c < kRows * (kD / 8); c += kThreads) {  // q rows, zeros past n_rows
    const int r = c / (kD / 8), e = (c % (kD / 8)) * 8;
    const bool valid = r < n_rows;
    const __nv_bfloat16* src = p.q;
    if (valid) {
      const int rr = row0 + r, t = sq.row0 + rr / p.group, h = hk * p.group + rr % p.group;
      src = p.q + t * p.q_s0 + h * p.q_s1 + e;
    }
    cp_async16(q_s + r * kLd + e, src, valid);
  }
  tile_slots(slot_s, p, sq.table, 0, block_last);
  tile_slots(slot_s + kTileN, p, sq.table, 1, block_last);
  __syncthreads();
  if (n_tiles > 0) load_kv_tile<kD, kThreads, kTileN>(k_s, v_s, p, hk, slot_s);
  cp_async_commit();

  int lim[2];  // causal limits of rows g and g + 8 of this warp (-1: padding row)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h;
    lim[h] = r < n_rows ? static_cast<int>(sq.last((row0 + r) / p.group)) : -1;
  }
  float o[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // l: this lane's part

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<0>();
    __syncthreads();  // tile t landed; every warp is done with tile t - 1 and its slots
    if (t + 1 < n_tiles) {
      load_kv_tile<kD, kThreads, kTileN>(k_s + ((t + 1) & 1) * kTileN * kLd,
                                         v_s + ((t + 1) & 1) * kTileN * kLd, p, hk,
                                         slot_s + ((t + 1) & 1) * kTileN);
    }
    cp_async_commit();
    tile_slots(slot_s + (t & 1) * kTileN, p, sq.table, t + 2, block_last);  // after the barrier
    const __nv_bfloat16* kt = k_s + (t & 1) * kTileN * kLd;
    const __nv_bfloat16* vt = v_s + (t & 1) * kTileN * kLd;
    float s[kST][4];
#pragma unroll
    for (int nt = 0; nt < kST; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t a[4];
      ldsm_x4(a, a_frag_addr(q_s + warp * 16 * kLd, kLd, ks * 16, lane));
#pragma unroll
      for (int np = 0; np < kST / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, kt + (np * 16 + (lane & 7) + (lane >> 4) * 8) * kLd + ks * 16 +
                       ((lane >> 3) & 1) * 8);
        mma_bf16(s[2 * np], a, b[0], b[1]);
        mma_bf16(s[2 * np + 1], a, b[2], b[3]);
      }
    }
    const bool masked = (t + 1) * kTileN - 1 > first_last;  // block-uniform
    uint32_t pa[kST][2];  // P as bf16 pairs: [n-tile][row g / g + 8]
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kST; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float v = __fmul_rn(s[nt][2 * h + e], p.scale_log2);
          if (masked && t * kTileN + nt * 8 + 2 * c4 + e > lim[h]) v = -INFINITY;
          s[nt][2 * h + e] = v;
          mx = fmaxf(mx, v);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      float m_use;
      const float alpha = softmax_rescale(m_run[h], mx, m_use);
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kST; ++nt) {
        pa[nt][h] = pack_bf16(fast_exp2(s[nt][2 * h] - m_use), fast_exp2(s[nt][2 * h + 1] - m_use));
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pa[nt][h]));
        sum = __fadd_rn(sum, __fadd_rn(f.x, f.y));
      }
      l_run[h] = __fmaf_rn(l_run[h], alpha, sum);
      if (!__all_sync(0xffffffffu, alpha == 1.f)) {  // x * 1 == x: skipping changes no bits
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          o[nt][2 * h] = __fmul_rn(o[nt][2 * h], alpha);
          o[nt][2 * h + 1] = __fmul_rn(o[nt][2 * h + 1], alpha);
        }
      }
    }
#pragma unroll
    for (int ks = 0; ks < kTileN / 16; ++ks) {
      const uint32_t a[4] = {pa[2 * ks][0], pa[2 * ks][1], pa[2 * ks + 1][0], pa[2 * ks + 1][1]};
      const __nv_bfloat16* vrow = vt + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd;
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b[4];
        ldsm_x4_t(b, vrow + np * 16 + (lane >> 4) * 8);
        mma_bf16(o[2 * np], a, b[0], b[1]);
        mma_bf16(o[2 * np + 1], a, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = l_run[h];
    l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
    l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int r = warp * 16 + g + 8 * h;
    if (r >= n_rows) continue;
    const int rr = row0 + r, tok = sq.row0 + rr / p.group, hq = hk * p.group + rr % p.group;
    __nv_bfloat16* dst = p.out + tok * p.out_s0 + hq * p.out_s1;
    const __nv_bfloat16* gate = p.gate ? p.gate + tok * p.g_s0 + hq * p.g_s1 : nullptr;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int e = nt * 8 + 2 * c4;
      float y0 = o[nt][2 * h] * inv, y1 = o[nt][2 * h + 1] * inv;
      if (gate != nullptr) {
        const float2 gv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(gate + e));
        y0 *= cuda::sigmoid(gv.x);
        y1 *= cuda::sigmoid(gv.y);
      }
      *reinterpret_cast<__nv_bfloat162*>(dst + e) = __floats2bfloat162_rn(y0, y1);
    }
  }
}

// Row blocks of the call at most: sum_s ceil(R_s / K) <= (sum_s R_s + n_seqs (K - 1)) / K with
// sum_s R_s <= rows_bound x group, and <= n_seqs x ceil(max R_s / K); exact for one sequence.
int64_t block_bound(const AttnParams& p, int64_t rows_bound, int64_t max_rows, int rows_per_cta) {
  const int64_t k = rows_per_cta;
  return std::min((rows_bound * p.group + p.n_seqs * (k - 1)) / k,
                  p.n_seqs * ((max_rows * p.group + k - 1) / k));
}

template <int kD, int kWarps>
void launch(const AttnParams& p, int64_t blocks, cudaStream_t s) {
  constexpr size_t smem = PrefillSmem<kD, kWarps>::kPrefix;
  static_assert(smem + seq_prefix_bytes(kMaxSeqs) + 256 <= kSmemPerBlock, "prefill shared memory");
  auto* kernel = attention_prefill_kernel<kD, kWarps>;
  // Once per process and instantiation (the attribute is per device; one device per process).
  static const cudaError_t opted_in =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem + seq_prefix_bytes(kMaxSeqs)));
  cuda::check(opted_in, "cudaFuncSetAttribute(attention_prefill_kernel)");
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(blocks, 1)), p.hkv);
  kernel<<<grid, kWarps * 32, smem + seq_prefix_bytes(p.n_seqs), s>>>(p);
  cuda::check_launch("attention_prefill_kernel");
}

}  // namespace

void launch_prefill(const AttnParams& p, int head_dim, int64_t rows_bound, int64_t max_rows,
                    cudaStream_t s) {
  // 8 warps (128 rows) per CTA, or 6 when that fills the last wave of CTAs better: a CTA's time
  // grows with its rows, so the estimate is waves x rows per CTA. Only the work split changes,
  // never a row's arithmetic; it depends on host bounds only.
  const int sms = cuda::sm_count();
  auto cost = [&](int warps) {
    const int64_t ctas = block_bound(p, rows_bound, max_rows, 16 * warps) * p.hkv;
    return (ctas + sms - 1) / sms * warps;
  };
  const bool six = cost(6) < cost(8);
  const int64_t blocks = block_bound(p, rows_bound, max_rows, six ? 96 : 128);
  if (head_dim == 64) six ? launch<64, 6>(p, blocks, s) : launch<64, 8>(p, blocks, s);
  if (head_dim == 128) six ? launch<128, 6>(p, blocks, s) : launch<128, 8>(p, blocks, s);
  if (head_dim == 256) six ? launch<256, 6>(p, blocks, s) : launch<256, 8>(p, blocks, s);
}

}  // namespace tandem::kernels::attn
