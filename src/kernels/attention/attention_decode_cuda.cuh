// Internals of the decode/verify split-KV kernels (attention_decode_cuda.cu): the per-tile
// function both kernels share, its folds, and how a work item of a batched call (sequence, split,
// kv head, row block) finds its rows, positions and partials. Not an interface for other ops.
#pragma once

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.cuh"

namespace tandem::kernels::attn::decode {

constexpr int kGranule = static_cast<int>(kAttentionSplitGranule);
constexpr int kTileN = 64;                 // positions per tile
constexpr int kTiles = kGranule / kTileN;  // tiles per split
constexpr int kHalf = kTiles / 2;          // tiles per half split
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPLd = kTileN + 8;  // bf16 probability row stride (conflict-free ldmatrix)
static_assert(kTiles == 8 && kWarps * 8 == kTileN, "8 tiles of 64; warp w owns 8 positions");

// One fold step: M' = max(M, mk); scales a = 2^(M - M') for the old state, b = 2^(mk - M') for
// the new part. Shared by every fold so that all paths round identically.
__device__ __forceinline__ void fold_scales(float& m, float mk, float& a, float& b) {
  const float mn = fmaxf(m, mk);
  a = exp2f(m - mn);
  b = exp2f(mk - mn);
  m = mn;
}
__device__ __forceinline__ float fold(float acc, float a, float x, float b) {
  return __fmaf_rn(x, b, __fmul_rn(acc, a));
}

template <int kD, int kMT>
struct Tile {
  static constexpr int kRows = 16 * kMT;
  static constexpr int kLd = kD + 8;   // bf16 row stride of Q, K, V: conflict-free ldmatrix
  static constexpr int kOLd = kD + 4;  // f32 row stride of partial outputs
  static constexpr int kKSteps = kD / 16;
  static constexpr int kDimsPerWarp = kD / kWarps;  // P V output slice: 32, 16 or 8 dims
  static constexpr int kNT = kDimsPerWarp / 8;
  // Scratch: P, per-warp row maxima and sums, per-row m_t and l_t.
  static constexpr size_t kP = 0;
  static constexpr size_t kRedMax = kP + size_t{kRows} * kPLd * 2;
  static constexpr size_t kRedSum = kRedMax + size_t{kWarps} * kRows * 4;
  static constexpr size_t kM = kRedSum + size_t{kWarps} * kRows * 4;
  static constexpr size_t kL = kM + size_t{kRows} * 4;
  static constexpr size_t kScratch = kL + size_t{kRows} * 4;
  static constexpr size_t kTileBytes = size_t{kTileN} * kLd * 2;  // one K or V tile
};

// The first of the m-tiles that the thread's warp set owns (kMT / kSets of them, in order).
template <int kMT, int kSets>
__device__ __forceinline__ int own_mt0() {
  return static_cast<int>(threadIdx.x >> 5) / kWarps * (kMT / kSets);
}

// One tile's partial for the rows of this warp's set: o = O_t (this warp's dim slice), m/l = m_t,
// l_t of the thread's rows 16 mt + g + 8 h for its set's m-tiles mt = set * kOwn + j (j < kOwn);
// also stored to m_s/l_s by one thread per row. lim: last visible position of those rows relative
// to the tile start. kSets warp sets of kWarps warps share the tile: warp w owns positions and
// output dims by w % kWarps and m-tiles by w / kWarps, so every row's products and sums are the
// same instructions in the same order whatever kSets is (the same bits). Q, K and V must be
// visible in shared memory; contains two barriers (all threads must call it). With kQRegs the
// set's Q fragments come from q_regs ([kOwn][kKSteps][4], load_q_frags: the same values ldmatrix
// reads here) instead of shared memory.
template <int kD, int kMT, int kSets, bool kQRegs = false>
__device__ __forceinline__ void tile_partial(
    const __nv_bfloat16* q_s, const __nv_bfloat16* k_s, const __nv_bfloat16* v_s,
    unsigned char* scratch, const int (&lim)[kMT / kSets][2], float scale_log2,
    float (&o)[kMT / kSets][Tile<kD, kMT>::kNT][4], float (&m)[kMT / kSets][2],
    float (&l)[kMT / kSets][2], const uint32_t (*q_regs)[Tile<kD, kMT>::kKSteps][4] = nullptr) {
  using T = Tile<kD, kMT>;
  constexpr int kRows = T::kRows, kLd = T::kLd, kNT = T::kNT, kOwn = kMT / kSets;
  static_assert(kSets >= 1 && kMT % kSets == 0, "each set owns whole m-tiles");
  auto* p_s = reinterpret_cast<__nv_bfloat16*>(scratch + T::kP);
  auto* red_max = reinterpret_cast<float*>(scratch + T::kRedMax);
  auto* red_sum = reinterpret_cast<float*>(scratch + T::kRedSum);
  auto* m_s = reinterpret_cast<float*>(scratch + T::kM);
  auto* l_s = reinterpret_cast<float*>(scratch + T::kL);
  const int lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;
  const int warp = static_cast<int>(threadIdx.x >> 5) % kWarps, mt0 = own_mt0<kMT, kSets>();

  float s[kOwn][4];  // S (log2 domain, masked) at positions 8 warp + 2 c4 + {0, 1}
  uint32_t kb[T::kKSteps][2];
#pragma unroll
  for (int kp = 0; kp < T::kKSteps / 2; ++kp) {
    uint32_t r[4];
    ldsm_x4(r, k_s + (8 * warp + (lane & 7)) * kLd + kp * 32 + (lane >> 3) * 8);
    kb[2 * kp][0] = r[0], kb[2 * kp][1] = r[1], kb[2 * kp + 1][0] = r[2], kb[2 * kp + 1][1] = r[3];
  }
#pragma unroll
  for (int j = 0; j < kOwn; ++j) {
    const int mt = mt0 + j;
    float acc[4][4] = {};
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
      if constexpr (kQRegs) {
        mma_bf16(acc[ks % 4], q_regs[j][ks], kb[ks][0], kb[ks][1]);
      } else {
        uint32_t a[4];
        ldsm_x4(a, a_frag_addr(q_s + mt * 16 * kLd, kLd, ks * 16, lane));
        mma_bf16(acc[ks % 4], a, kb[ks][0], kb[ks][1]);
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float v = __fmul_rn(
          __fadd_rn(__fadd_rn(acc[0][e], acc[1][e]), __fadd_rn(acc[2][e], acc[3][e])), scale_log2);
      s[j][e] = 8 * warp + 2 * c4 + (e & 1) > lim[j][e >> 1] ? -INFINITY : v;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // the row's max over this warp's 8 positions
      float mx = fmaxf(s[j][2 * h], s[j][2 * h + 1]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if (c4 == 0) red_max[warp * kRows + mt * 16 + g + 8 * h] = mx;
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kOwn; ++j) {  // P = bf16(2^(S - m_t)); the row's sum over 8 positions
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = (mt0 + j) * 16 + g + 8 * h;
      float mx = red_max[r];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, red_max[w * kRows + r]);
      m[j][h] = mx;
      const float m_use = mx == -INFINITY ? 0.f : mx;
      const uint32_t pk = pack_bf16(exp2f(s[j][2 * h] - m_use), exp2f(s[j][2 * h + 1] - m_use));
      *reinterpret_cast<uint32_t*>(p_s + r * kPLd + 8 * warp + 2 * c4) = pk;
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pk));
      float sum = __fadd_rn(f.x, f.y);
      sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
      sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
      if (c4 == 0) red_sum[warp * kRows + r] = sum;
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kOwn; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = (mt0 + j) * 16 + g + 8 * h;
      float sum = red_sum[r];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) sum = __fadd_rn(sum, red_sum[w * kRows + r]);
      l[j][h] = sum;
      if (warp == 0 && c4 == 0) m_s[r] = m[j][h], l_s[r] = sum;
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) o[j][nt][0] = o[j][nt][1] = o[j][nt][2] = o[j][nt][3] = 0.f;
  }
  const int d0 = warp * T::kDimsPerWarp;
#pragma unroll
  for (int ks = 0; ks < kTileN / 16; ++ks) {  // O_t = P V over the warp's dims
    uint32_t vb[kNT][2];
    const __nv_bfloat16* vrow = v_s + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd + d0;
    if constexpr (kNT == 1) {
      ldsm_x2_t(vb[0][0], vb[0][1], vrow);
    } else {
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t r[4];
        ldsm_x4_t(r, vrow + np * 16 + (lane >> 4) * 8);
        vb[2 * np][0] = r[0], vb[2 * np][1] = r[1], vb[2 * np + 1][0] = r[2];
        vb[2 * np + 1][1] = r[3];
      }
    }
#pragma unroll
    for (int j = 0; j < kOwn; ++j) {
      uint32_t a[4];
      ldsm_x4(a, a_frag_addr(p_s + (mt0 + j) * 16 * kPLd, kPLd, ks * 16, lane));
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mma_bf16(o[j][nt], a, vb[nt][0], vb[nt][1]);
    }
  }
}

// The A fragments of Q for the kOwn m-tiles from mt0 (tile_partial's kQRegs), as tile_partial
// reads them from shared memory.
template <int kD, int kMT, int kOwn>
__device__ __forceinline__ void load_q_frags(const __nv_bfloat16* q_s, int mt0,
                                             uint32_t (&q_regs)[kOwn][Tile<kD, kMT>::kKSteps][4]) {
  using T = Tile<kD, kMT>;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < kOwn; ++j) {
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
      ldsm_x4(q_regs[j][ks], a_frag_addr(q_s + (mt0 + j) * 16 * T::kLd, T::kLd, ks * 16, lane));
    }
  }
}

// One work item: split `split` of sequence `seq`, kv head `hk`, and the (row, q head) pairs
// [row0, row0 + n_rows) of that head (pair rr is row rr / group, q head hk * group + rr % group).
struct Item {
  SeqView seq;
  int hk, split, row0, n_rows;
};

constexpr int kRingMinKv = 4096;  // kv_len above which the ring kernel takes a sequence

// Work items of sequence s (splits x kv heads x row blocks) for the ring kernel (ring) or the tile
// kernel: the ring takes the sequences with more than min_kv positions, the tile the others.
__device__ __forceinline__ int items_of(const AttnParams& p, int s, bool ring, int min_kv) {
  const SeqView v = seq_view(p, s);
  if (v.n == 0 || v.kv == 0 || (v.kv > min_kv) != ring) return 0;
  const int splits = static_cast<int>((v.kv + kGranule - 1) / kGranule);
  const int blocks = (v.n * p.group + p.row_block - 1) / p.row_block;
  return splits * p.hkv * blocks;
}

// A first look at the call: whether some sequence with rows has at most kRingMinKv positions
// (bit 0) and whether some has more (bit 1), so that the kernel whose range is empty leaves
// without the work list. Up to kSeqsPerThread sequences every thread reads them all itself (no
// barrier: a lone sequence's empty kernel leaves after one load); beyond, one vote per bit.
__device__ __forceinline__ int kv_ranges(const AttnParams& p) {
  constexpr int kSeqsPerThread = 8;
  const bool alone = p.n_seqs <= kSeqsPerThread;
  bool has_short = false, has_long = false;
  for (int s = alone ? 0 : threadIdx.x; s < p.n_seqs; s += alone ? 1 : blockDim.x) {
    const SeqView v = seq_view(p, s);
    if (v.n == 0 || v.kv == 0) continue;
    has_short |= v.kv <= kRingMinKv;
    has_long |= v.kv > kRingMinKv;
  }
  if (!alone) {
    has_short = __syncthreads_or(has_short) != 0;
    has_long = __syncthreads_or(has_long) != 0;
  }
  return (has_short ? 1 : 0) | (has_long ? 2 : 0);
}

// The work list of the ring kernel (ring) or the tile kernel into prefix (seq_prefix); returns its
// length (0: prefix unset). Both kernels compute the same split of the sequences from the call's
// metadata: the tile kernel takes the sequences of at most kRingMinKv positions while their items
// fit in one wave of its grid (tile_budget), where one tile per CTA gives short contexts the most
// parallelism; beyond that (a large batch) the ring kernel, which streams 4 tiles per CTA, takes
// every sequence. The two compute the same function bit for bit, so the split changes no row's
// bits. Every branch below is uniform over the block.
__device__ __forceinline__ int work_list(const AttnParams& p, int* prefix, bool ring) {
  const int ranges = kv_ranges(p);
  if (ranges == 0 || (!ring && (ranges & 1) == 0)) return 0;
  const int tile_items = (ranges & 1) == 0 ? 0 : seq_prefix(p.n_seqs, prefix, [&](int s) {
    return items_of(p, s, false, kRingMinKv);
  });
  const int min_kv = tile_items <= p.tile_budget ? kRingMinKv : 0;
  if (!ring) return min_kv == kRingMinKv ? tile_items : 0;  // prefix holds the tile's list
  if (min_kv == kRingMinKv && (ranges & 2) == 0) return 0;  // the ring's range is empty
  return seq_prefix(p.n_seqs, prefix, [&](int s) { return items_of(p, s, ring, min_kv); });
}

// Item `item` of the work list (prefix: seq_prefix over items_of). Items of one sequence are
// numbered row block fastest, then kv head, then split: the row blocks of one (split, head), which
// read the same K/V, run side by side.
__device__ __forceinline__ Item item_at(const AttnParams& p, const int* prefix, int item) {
  const int s = find_seq(prefix, p.n_seqs, item);
  Item w;
  w.seq = seq_view(p, s);
  const int rows = w.seq.n * p.group;
  const int blocks = (rows + p.row_block - 1) / p.row_block;
  int local = item - prefix[s];
  w.row0 = local % blocks * p.row_block;
  local /= blocks;
  w.hk = local % p.hkv;
  w.split = local / p.hkv;
  w.n_rows = min(p.row_block, rows - w.row0);
  return w;
}

// Loads the item's query rows (zeros past n_rows) and the cache slots of `n` positions from pos
// (-1 at and past end) into shared memory; issues the q loads as cp.async (not committed). The
// block has kBlockThreads threads.
template <int kD, int kMT, int kBlockThreads>
__device__ __forceinline__ void load_q_and_slots(const AttnParams& p, const Item& w,
                                                 __nv_bfloat16* q_s, int32_t* slot_s, int pos,
                                                 int n, int end) {
  constexpr int kChunks = kD / 8, kLd = Tile<kD, kMT>::kLd;
  for (int c = threadIdx.x; c < 16 * kMT * kChunks; c += kBlockThreads) {
    const int r = c / kChunks, e = (c % kChunks) * 8;
    const __nv_bfloat16* src = p.q;
    if (r < w.n_rows) {
      const int rr = w.row0 + r, t = w.seq.row0 + rr / p.group, h = w.hk * p.group + rr % p.group;
      src = p.q + t * p.q_s0 + h * p.q_s1 + e;
    }
    cp_async16(q_s + r * kLd + e, src, r < w.n_rows);
  }
  const int bs = static_cast<int>(p.block_size);
  for (int j = threadIdx.x; j < n; j += kBlockThreads) {
    const int ps = pos + j;
    slot_s[j] = ps < end ? w.seq.table[ps / bs] * bs + ps % bs : -1;
  }
}

// Causal limits of the thread's rows relative to position `pos` (-1 for padding rows), for the
// kOwn m-tiles from mt0.
template <int kOwn>
__device__ __forceinline__ void row_limits(const AttnParams& p, const Item& w, int pos, int mt0,
                                           int (&lim)[kOwn][2]) {
  const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
  for (int j = 0; j < kOwn; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = (mt0 + j) * 16 + g + 8 * h;
      lim[j][h] = r < w.n_rows ? static_cast<int>(w.seq.last((w.row0 + r) / p.group) - pos) : -1;
    }
  }
}

// Index of (row, q head) pair rr's partials in the workspace ((row - row_start[0]) * hq + head),
// or -1 when the row lies past the workspace's rows (a sequence with more rows than the host's
// bound: nothing is written for it).
__device__ __forceinline__ int64_t part_row(const AttnParams& p, const Item& w, int rr) {
  const int rel = w.seq.rel0 + rr / p.group;
  if (rel < 0 || rel >= p.ws_rows) return -1;
  return static_cast<int64_t>(rel) * p.hq + w.hk * p.group + rr % p.group;
}

}  // namespace tandem::kernels::attn::decode
