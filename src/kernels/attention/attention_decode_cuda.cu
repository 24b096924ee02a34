// Decode/verify attention kernels (n_tokens <= kAttentionMaxDecodeTokens) on tensor cores. Both
// compute the same function, bit for bit; which one runs depends only on kv_len (read on the
// device), so graphs replay either way:
//  - tile kernel (kv_len <= kRingMinKv): a cluster of 8 CTAs per split, CTA r owns tile r (64
//    positions), so even a 1K context spreads over 64 SMs; the tile partials are folded through
//    distributed shared memory.
//  - ring kernel (longer contexts): a cluster of 2 CTAs per split, CTA j streams tiles
//    4j..4j+3 through a cp.async ring and folds them in registers; the two halves are combined
//    through distributed shared memory.
// The function, per query row and split of kAttentionSplitGranule positions (8 tiles of 64):
//   tile t: S = Q K^T (mma.sync; 4 interleaved k chains added in a fixed order), exact softmax in
//   the tile: m_t = max S, P = bf16(2^(S - m_t)), l_t = sum P, O_t = P V (mma.sync);
//   half h: ordered fold of tiles 4h..4h+3, M' = max(M, m_t), A' = A 2^(M-M') + O_t 2^(m_t-M'),
//   L' likewise, starting empty; split: the two halves folded the same way.
// A tile with m_t = -inf (none of the row's visible positions) would leave the fold bit-for-bit
// unchanged, so it is skipped; every reduction follows the position structure, and every mma
// output element sees only its own query row. Hence a row's bits never depend on n_tokens, its row
// block, or kv_len beyond its causal limit (DESIGN.md inv. 2), and all (1+k)*G rows of a kv head
// share each KV tile (section 4). Output: unnormalised A, M and L per (row, split), merged by
// attention_merge_kernel (attention_cuda.cu).
#include <cooperative_groups.h>

#include <algorithm>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.cuh"

namespace tandem::kernels::attn {

namespace {

namespace cg = cooperative_groups;

constexpr int kGranule = static_cast<int>(kAttentionSplitGranule);
constexpr int kTileN = 64;                 // positions per tile
constexpr int kTiles = kGranule / kTileN;  // tiles per split
constexpr int kHalf = kTiles / 2;          // tiles per half split
constexpr int kRingMinKv = 4096;           // kv_len above which the ring kernel runs
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPLd = kTileN + 8;  // bf16 probability row stride (conflict-free ldmatrix)
static_assert(kTiles == 8 && kWarps * 8 == kTileN, "8 tiles of 64; warp w owns 8 positions");

// A block with nothing to do leaves before the PDL wait (it reads only kv_len, set before the
// step). The next kernel waits only for this grid, so this grid must still finish after its
// predecessor, and must trigger the next launch only after that predecessor's wait: block
// (0, 0, 0) always waits (pdl_begin) before it leaves.
__device__ __forceinline__ void leave_early() {
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) cuda::pdl_begin();
}

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

// One tile's partial for all rows: o = O_t (this warp's dim slice), m/l = m_t, l_t of the thread's
// rows 16 mt + g + 8 h; also stored to m_s/l_s by one thread per row. lim: last visible position
// of those rows relative to the tile start. Q, K and V must be visible in shared memory; contains
// two barriers (all threads must call it).
template <int kD, int kMT>
__device__ __forceinline__ void tile_partial(const __nv_bfloat16* q_s, const __nv_bfloat16* k_s,
                                             const __nv_bfloat16* v_s, unsigned char* scratch,
                                             const int (&lim)[kMT][2], float scale_log2,
                                             float (&o)[kMT][Tile<kD, kMT>::kNT][4],
                                             float (&m)[kMT][2], float (&l)[kMT][2]) {
  using T = Tile<kD, kMT>;
  constexpr int kRows = T::kRows, kLd = T::kLd, kNT = T::kNT;
  auto* p_s = reinterpret_cast<__nv_bfloat16*>(scratch + T::kP);
  auto* red_max = reinterpret_cast<float*>(scratch + T::kRedMax);
  auto* red_sum = reinterpret_cast<float*>(scratch + T::kRedSum);
  auto* m_s = reinterpret_cast<float*>(scratch + T::kM);
  auto* l_s = reinterpret_cast<float*>(scratch + T::kL);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;

  float s[kMT][4];  // S (log2 domain, masked) at positions 8 warp + 2 c4 + {0, 1}
  uint32_t kb[T::kKSteps][2];
#pragma unroll
  for (int kp = 0; kp < T::kKSteps / 2; ++kp) {
    uint32_t r[4];
    ldsm_x4(r, k_s + (8 * warp + (lane & 7)) * kLd + kp * 32 + (lane >> 3) * 8);
    kb[2 * kp][0] = r[0], kb[2 * kp][1] = r[1], kb[2 * kp + 1][0] = r[2], kb[2 * kp + 1][1] = r[3];
  }
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    float acc[4][4] = {};
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
      uint32_t a[4];
      ldsm_x4(a, a_frag_addr(q_s + mt * 16 * kLd, kLd, ks * 16, lane));
      mma_bf16(acc[ks % 4], a, kb[ks][0], kb[ks][1]);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float v = __fmul_rn(
          __fadd_rn(__fadd_rn(acc[0][e], acc[1][e]), __fadd_rn(acc[2][e], acc[3][e])), scale_log2);
      s[mt][e] = 8 * warp + 2 * c4 + (e & 1) > lim[mt][e >> 1] ? -INFINITY : v;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // the row's max over this warp's 8 positions
      float mx = fmaxf(s[mt][2 * h], s[mt][2 * h + 1]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if (c4 == 0) red_max[warp * kRows + mt * 16 + g + 8 * h] = mx;
    }
  }
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {  // P = bf16(2^(S - m_t)); the row's sum over 8 positions
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mt * 16 + g + 8 * h;
      float mx = red_max[r];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, red_max[w * kRows + r]);
      m[mt][h] = mx;
      const float m_use = mx == -INFINITY ? 0.f : mx;
      const uint32_t pk = pack_bf16(exp2f(s[mt][2 * h] - m_use), exp2f(s[mt][2 * h + 1] - m_use));
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
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mt * 16 + g + 8 * h;
      float sum = red_sum[r];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) sum = __fadd_rn(sum, red_sum[w * kRows + r]);
      l[mt][h] = sum;
      if (warp == 0 && c4 == 0) m_s[r] = m[mt][h], l_s[r] = sum;
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
      o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.f;
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
    for (int mt = 0; mt < kMT; ++mt) {
      uint32_t a[4];
      ldsm_x4(a, a_frag_addr(p_s + mt * 16 * kPLd, kPLd, ks * 16, lane));
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mma_bf16(o[mt][nt], a, vb[nt][0], vb[nt][1]);
    }
  }
}

// Loads the query rows (zeros past n_rows) and the cache slots of `n` positions from pos (-1 at
// and past end) into shared memory; issues the q loads as cp.async (not committed).
template <int kD, int kMT>
__device__ __forceinline__ void load_q_and_slots(const AttnParams& p, __nv_bfloat16* q_s,
                                                 int32_t* slot_s, int hk, int row0, int n_rows,
                                                 int pos, int n, int end) {
  constexpr int kChunks = kD / 8, kLd = Tile<kD, kMT>::kLd;
  for (int c = threadIdx.x; c < 16 * kMT * kChunks; c += kThreads) {
    const int r = c / kChunks, e = (c % kChunks) * 8;
    const __nv_bfloat16* src = p.q;
    if (r < n_rows) {
      const int rr = row0 + r, t = rr / p.group, h = hk * p.group + rr % p.group;
      src = p.q + t * p.q_s0 + h * p.q_s1 + e;
    }
    cp_async16(q_s + r * kLd + e, src, r < n_rows);
  }
  const int bs = static_cast<int>(p.block_size);
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const int ps = pos + j;
    slot_s[j] = ps < end ? p.block_table[ps / bs] * bs + ps % bs : -1;
  }
}

// Causal limits of the thread's rows relative to position `pos` (-1 for padding rows).
template <int kMT>
__device__ __forceinline__ void row_limits(const AttnParams& p, int64_t kv_len, int row0,
                                           int n_rows, int pos, int (&lim)[kMT][2]) {
  const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mt * 16 + g + 8 * h;
      lim[mt][h] =
          r < n_rows ? static_cast<int>(last_pos(p, kv_len, (row0 + r) / p.group) - pos) : -1;
    }
  }
}

__device__ __forceinline__ int64_t out_row(const AttnParams& p, int hk, int rr) {
  return static_cast<int64_t>(rr / p.group) * p.hq + hk * p.group + rr % p.group;
}

template <int kD, int kMT>
struct TileSmem {
  using T = Tile<kD, kMT>;
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + size_t{T::kRows} * T::kLd * 2;
  static constexpr size_t kV = kK + T::kTileBytes;
  static constexpr size_t kO = kK;  // O_t reuses the K/V region once P V is done
  static constexpr size_t kScratch = kV + T::kTileBytes;
  static constexpr size_t kSlot = kScratch + T::kScratch;
  static constexpr size_t kBytes = kSlot + size_t{kTileN} * 4;  // <= 113 KB: two CTAs per SM
  static_assert(size_t{T::kRows} * T::kOLd * 4 <= 2 * T::kTileBytes, "O_t fits");
};

template <int kD, int kMT>
__global__ void __cluster_dims__(kTiles, 1, 1) __launch_bounds__(kThreads)
    attention_tile_kernel(AttnParams p) {
  using T = Tile<kD, kMT>;
  using L = TileSmem<kD, kMT>;
  constexpr int kRows = T::kRows, kNT = T::kNT;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kQ);
  auto* k_s = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kK);
  auto* v_s = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kV);
  auto* o_s = reinterpret_cast<float*>(smem_raw + L::kO);
  unsigned char* scratch = smem_raw + L::kScratch;
  auto* m_s = reinterpret_cast<float*>(scratch + T::kM);
  auto* l_s = reinterpret_cast<float*>(scratch + T::kL);
  auto* slot_s = reinterpret_cast<int32_t*>(smem_raw + L::kSlot);

  const int64_t kv_len = device_kv_len(p);        // set before the step: readable before the wait
  if (kv_len > kRingMinKv) return leave_early();  // the ring kernel's call (the whole grid)
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int split = blockIdx.x / kTiles, hk = blockIdx.y;
  const int row0 = blockIdx.z * kRows;
  const int n_rows = min(kRows, static_cast<int>(p.nq) * p.group - row0);
  const int64_t pos0 = static_cast<int64_t>(split) * kGranule;
  const int64_t block_last = last_pos(p, kv_len, (row0 + n_rows - 1) / p.group);
  // The whole cluster: no row of this block sees this split.
  if (pos0 > block_last) return leave_early();
  cuda::pdl_begin();  // q and the new K/V rows are the previous kernels' outputs
  const int end = static_cast<int>(min(kv_len, min(pos0 + kGranule, block_last + 1)));
  const int tile_pos = static_cast<int>(pos0) + rank * kTileN;
  const bool active = tile_pos < end;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;

  if (active) {
    int lim[kMT][2];
    row_limits<kMT>(p, kv_len, row0, n_rows, tile_pos, lim);
    load_q_and_slots<kD, kMT>(p, q_s, slot_s, hk, row0, n_rows, tile_pos, kTileN, end);
    __syncthreads();
    load_kv_tile<kD, kThreads, kTileN>(k_s, v_s, p, hk, slot_s);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    float o[kMT][kNT][4], m[kMT][2], l[kMT][2];
    tile_partial<kD, kMT>(q_s, k_s, v_s, scratch, lim, p.scale_log2, o, m, l);
    __syncthreads();  // every warp is done reading V: O_t may overwrite the K/V region
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float* dst = o_s + (mt * 16 + g + 8 * h) * T::kOLd + warp * T::kDimsPerWarp + 2 * c4;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          *reinterpret_cast<float2*>(dst + nt * 8) =
              make_float2(o[mt][nt][2 * h], o[mt][nt][2 * h + 1]);
      }
    }
  } else {
    for (int r = threadIdx.x; r < kRows; r += kThreads) m_s[r] = -INFINITY;
  }
  cluster.sync();  // all 8 tile partials are visible cluster-wide

  // CTA `rank` folds output dims rank*d/8 .. of every row; all remote loads are issued first.
  constexpr int kUnits = kD / kTiles / 4;  // float4 units per row
  for (int u = threadIdx.x; u < n_rows * kUnits; u += kThreads) {
    const int r = u / kUnits, d4 = rank * (kD / kTiles) + (u % kUnits) * 4;
    float mk[kTiles], lk[kTiles];
    float4 ok[kTiles];
#pragma unroll
    for (int k = 0; k < kTiles; ++k) {
      mk[k] = cluster.map_shared_rank(m_s, k)[r];
      lk[k] = cluster.map_shared_rank(l_s, k)[r];
      ok[k] = *reinterpret_cast<const float4*>(cluster.map_shared_rank(o_s, k) + r * T::kOLd + d4);
    }
    float M[2] = {-INFINITY, -INFINITY}, Ls[2] = {0.f, 0.f};
    float4 A[2] = {make_float4(0.f, 0.f, 0.f, 0.f), make_float4(0.f, 0.f, 0.f, 0.f)};
#pragma unroll
    for (int k = 0; k < kTiles; ++k) {
      const int h = k / kHalf;
      if (mk[k] == -INFINITY) continue;
      float a, b;
      fold_scales(M[h], mk[k], a, b);
      A[h] = make_float4(fold(A[h].x, a, ok[k].x, b), fold(A[h].y, a, ok[k].y, b),
                         fold(A[h].z, a, ok[k].z, b), fold(A[h].w, a, ok[k].w, b));
      Ls[h] = fold(Ls[h], a, lk[k], b);
    }
    if (M[1] != -INFINITY) {
      float a, b;
      fold_scales(M[0], M[1], a, b);
      A[0] = make_float4(fold(A[0].x, a, A[1].x, b), fold(A[0].y, a, A[1].y, b),
                         fold(A[0].z, a, A[1].z, b), fold(A[0].w, a, A[1].w, b));
      Ls[0] = fold(Ls[0], a, Ls[1], b);
    }
    const int64_t row = out_row(p, hk, row0 + r);
    *reinterpret_cast<float4*>(p.part_o + (row * p.max_splits + split) * kD + d4) = A[0];
    if (rank == 0 && u % kUnits == 0) {
      p.part_ml[(row * p.max_splits + split) * 2] = M[0];
      p.part_ml[(row * p.max_splits + split) * 2 + 1] = Ls[0];
    }
  }
  cluster.sync();  // keep this CTA's shared memory alive until every rank has read it
}

template <int kD, int kMT>
struct RingSmem {
  using T = Tile<kD, kMT>;
  static constexpr int kStages = kMT == 1 ? 3 : 2;  // (K, V) tile pairs in the ring
  static constexpr size_t kQ = 0;
  static constexpr size_t kRing = kQ + size_t{T::kRows} * T::kLd * 2;
  static constexpr size_t kO = kRing;  // the half's result reuses the ring after the last tile
  static constexpr size_t kScratch = kRing + size_t{kStages} * 2 * T::kTileBytes;
  static constexpr size_t kSlot = kScratch + T::kScratch;
  static constexpr size_t kBytes = kSlot + size_t{kHalf} * kTileN * 4;
  static_assert(size_t{T::kRows} * T::kOLd * 4 <= kStages * 2 * T::kTileBytes, "A fits");
};

template <int kD, int kMT>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads, 1)
    attention_ring_kernel(AttnParams p) {
  using T = Tile<kD, kMT>;
  using L = RingSmem<kD, kMT>;
  constexpr int kRows = T::kRows, kNT = T::kNT, kS = L::kStages;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kQ);
  auto* ring = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kRing);
  auto* o_s = reinterpret_cast<float*>(smem_raw + L::kO);
  unsigned char* scratch = smem_raw + L::kScratch;
  auto* m_s = reinterpret_cast<float*>(scratch + T::kM);
  auto* l_s = reinterpret_cast<float*>(scratch + T::kL);
  auto* slot_s = reinterpret_cast<int32_t*>(smem_raw + L::kSlot);
  constexpr size_t kTileElems = T::kTileBytes / 2;

  const int64_t kv_len = device_kv_len(p);         // set before the step: readable before the wait
  if (kv_len <= kRingMinKv) return leave_early();  // the tile kernel's call (the whole grid)
  cg::cluster_group cluster = cg::this_cluster();
  const int half = static_cast<int>(cluster.block_rank());
  const int split = blockIdx.x / 2, hk = blockIdx.y;
  const int row0 = blockIdx.z * kRows;
  const int n_rows = min(kRows, static_cast<int>(p.nq) * p.group - row0);
  const int64_t pos0 = static_cast<int64_t>(split) * kGranule;
  const int64_t block_last = last_pos(p, kv_len, (row0 + n_rows - 1) / p.group);
  // The whole cluster: no row of this block sees this split.
  if (pos0 > block_last) return leave_early();
  cuda::pdl_begin();  // q and the new K/V rows are the previous kernels' outputs
  const int end = static_cast<int>(min(kv_len, min(pos0 + kGranule, block_last + 1)));
  const int half_pos = static_cast<int>(pos0) + half * kHalf * kTileN;
  const int n_my = max(0, min(kHalf, (end - half_pos + kTileN - 1) / kTileN));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;

  load_q_and_slots<kD, kMT>(p, q_s, slot_s, hk, row0, n_rows, half_pos, kHalf * kTileN, end);
  __syncthreads();
  auto issue = [&](int i) {  // tile i of this half into stage i % kS (q rides in group 0)
    if (i < n_my) {
      __nv_bfloat16* st = ring + (i % kS) * 2 * kTileElems;
      load_kv_tile<kD, kThreads, kTileN>(st, st + kTileElems, p, hk, slot_s + i * kTileN);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kS - 1; ++i) issue(i);
  int lim0[kMT][2];
  row_limits<kMT>(p, kv_len, row0, n_rows, half_pos, lim0);
  float A[kMT][kNT][4], M[kMT][2], Ls[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    M[mt][0] = M[mt][1] = -INFINITY, Ls[mt][0] = Ls[mt][1] = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
      A[mt][nt][0] = A[mt][nt][1] = A[mt][nt][2] = A[mt][nt][3] = 0.f;
  }
  for (int i = 0; i < n_my; ++i) {
    cp_async_wait<kS - 2>();
    __syncthreads();  // tile i landed; stage (i - 1) % kS is free
    issue(i + kS - 1);
    int lim[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
      lim[mt][0] = lim0[mt][0] - i * kTileN, lim[mt][1] = lim0[mt][1] - i * kTileN;
    const __nv_bfloat16* st = ring + (i % kS) * 2 * kTileElems;
    float o[kMT][kNT][4], m[kMT][2], l[kMT][2];
    tile_partial<kD, kMT>(q_s, st, st + kTileElems, scratch, lim, p.scale_log2, o, m, l);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (m[mt][h] == -INFINITY) continue;
        float a, b;
        fold_scales(M[mt][h], m[mt][h], a, b);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          A[mt][nt][2 * h] = fold(A[mt][nt][2 * h], a, o[mt][nt][2 * h], b);
          A[mt][nt][2 * h + 1] = fold(A[mt][nt][2 * h + 1], a, o[mt][nt][2 * h + 1], b);
        }
        Ls[mt][h] = fold(Ls[mt][h], a, l[mt][h], b);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the ring is free: publish this half's (M, L, A)
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mt * 16 + g + 8 * h;
      float* dst = o_s + r * T::kOLd + warp * T::kDimsPerWarp + 2 * c4;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        *reinterpret_cast<float2*>(dst + nt * 8) =
            make_float2(A[mt][nt][2 * h], A[mt][nt][2 * h + 1]);
      if (warp == 0 && c4 == 0) m_s[r] = M[mt][h], l_s[r] = Ls[mt][h];
    }
  }
  cluster.sync();
  // CTA `half` combines output dims half*d/2 .. of every row: H0 folded with H1.
  constexpr int kUnits = kD / 2 / 4;
  const float* m_src[2] = {cluster.map_shared_rank(m_s, 0), cluster.map_shared_rank(m_s, 1)};
  const float* l_src[2] = {cluster.map_shared_rank(l_s, 0), cluster.map_shared_rank(l_s, 1)};
  const float* o_src[2] = {cluster.map_shared_rank(o_s, 0), cluster.map_shared_rank(o_s, 1)};
  for (int u = threadIdx.x; u < n_rows * kUnits; u += kThreads) {
    const int r = u / kUnits, d4 = half * (kD / 2) + (u % kUnits) * 4;
    float M0 = m_src[0][r], L0 = l_src[0][r];
    const float M1 = m_src[1][r], L1 = l_src[1][r];
    float4 A0 = *reinterpret_cast<const float4*>(o_src[0] + r * T::kOLd + d4);
    const float4 A1 = *reinterpret_cast<const float4*>(o_src[1] + r * T::kOLd + d4);
    if (M1 != -INFINITY) {
      float a, b;
      fold_scales(M0, M1, a, b);
      A0 = make_float4(fold(A0.x, a, A1.x, b), fold(A0.y, a, A1.y, b), fold(A0.z, a, A1.z, b),
                       fold(A0.w, a, A1.w, b));
      L0 = fold(L0, a, L1, b);
    }
    const int64_t row = out_row(p, hk, row0 + r);
    *reinterpret_cast<float4*>(p.part_o + (row * p.max_splits + split) * kD + d4) = A0;
    if (half == 0 && u % kUnits == 0) {
      p.part_ml[(row * p.max_splits + split) * 2] = M0;
      p.part_ml[(row * p.max_splits + split) * 2 + 1] = L0;
    }
  }
  cluster.sync();  // keep this CTA's shared memory alive until the other has read it
}

template <int kD, int kMT>
void launch(const AttnParams& p, cudaStream_t s) {
  const unsigned row_blocks = cuda::ceil_div(static_cast<int64_t>(p.nq) * p.group, 16 * kMT);
  // Shared-memory opt-ins once per process and instantiation (one device per process).
  constexpr size_t ring_smem = RingSmem<kD, kMT>::kBytes, tile_smem = TileSmem<kD, kMT>::kBytes;
  auto* ring = attention_ring_kernel<kD, kMT>;
  auto* tile = attention_tile_kernel<kD, kMT>;
  static const cudaError_t ring_ok = cudaFuncSetAttribute(
      ring, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(ring_smem));
  static const cudaError_t tile_ok = cudaFuncSetAttribute(
      tile, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(tile_smem));
  cuda::check(ring_ok, "cudaFuncSetAttribute(attention_ring_kernel)");
  cuda::check(tile_ok, "cudaFuncSetAttribute(attention_tile_kernel)");
  // Both are launched; each returns at once unless kv_len (on the device) is in its range.
  cuda::launch_pdl(ring, dim3(p.max_splits * 2, p.hkv, row_blocks), kThreads, ring_smem, s, p);
  cuda::check_launch("attention_ring_kernel");
  const int tile_splits = std::min(p.max_splits, kRingMinKv / kGranule);
  cuda::launch_pdl(tile, dim3(tile_splits * kTiles, p.hkv, row_blocks), kThreads, tile_smem, s, p);
  cuda::check_launch("attention_tile_kernel");
}

}  // namespace

void launch_decode(const AttnParams& p, int head_dim, cudaStream_t s) {
  const int rows = static_cast<int>(p.nq) * p.group;  // rows per kv head in this launch
  const int mt = rows <= 16 ? 1 : (rows <= 32 ? 2 : 4);
  if (head_dim == 64)
    mt == 1 ? launch<64, 1>(p, s) : (mt == 2 ? launch<64, 2>(p, s) : launch<64, 4>(p, s));
  if (head_dim == 128)
    mt == 1 ? launch<128, 1>(p, s) : (mt == 2 ? launch<128, 2>(p, s) : launch<128, 4>(p, s));
  if (head_dim == 256)
    mt == 1 ? launch<256, 1>(p, s) : (mt == 2 ? launch<256, 2>(p, s) : launch<256, 4>(p, s));
}

}  // namespace tandem::kernels::attn
