// Decode/verify attention kernels (at most kAttentionMaxDecodeTokens rows per sequence) on tensor
// cores, for a batch of sequences. Both kernels compute the same function, bit for bit; which one
// takes a sequence depends only on the call's kv_len and rows (read on the device: work_list), so
// graphs replay either way:
//  - tile kernel (kv_len <= kRingMinKv, while the call's short sequences fit in one wave of
//    it): a cluster of 8 CTAs per split, CTA r owns tile r (64 positions), so even a 1K context
//    spreads over 64 SMs; the tile partials are folded through distributed shared memory.
//  - ring kernel (longer contexts, and every sequence of a larger batch, where streaming beats
//    spreading): a cluster of 2 CTAs per split, CTA j streams tiles
//    4j..4j+3 through a cp.async ring and folds them in registers; the two halves are combined
//    through distributed shared memory. With 2+ m-tiles (verify rows) a CTA has two sets of 8
//    warps, each set computing half the m-tiles of every tile (tile_partial); with one (decode
//    rows) the item's Q fragments stay in registers.
// The function, per query row and split of kAttentionSplitGranule positions (8 tiles of 64):
//   tile t: S = Q K^T (mma.sync; 4 interleaved k chains added in a fixed order), exact softmax in
//   the tile: m_t = max S, P = bf16(2^(S - m_t)), l_t = sum P, O_t = P V (mma.sync);
//   half h: ordered fold of tiles 4h..4h+3, M' = max(M, m_t), A' = A 2^(M-M') + O_t 2^(m_t-M'),
//   L' likewise, starting empty; split: the two halves folded the same way.
// A tile with m_t = -inf (none of the row's visible positions) would leave the fold bit-for-bit
// unchanged, so it is skipped; every reduction follows the position structure, and every mma
// output element sees only its own query row. Hence a row's bits never depend on the other rows
// or sequences of the call, its row block, or kv_len beyond its causal limit (DESIGN.md inv. 2),
// and all (1+k)*G rows of a sequence's kv head share each KV tile (section 4). Output: unnormalised
// A, M and L per (row, split), merged by attention_merge_kernel (attention_cuda.cu).
// Work distribution: both grids are persistent, sized by host-known bounds only (sequences, rows
// per sequence, the block table's width, the GPU); each CTA numbers the (sequence, split, kv head,
// row block) items of its kernel's sequences by a prefix sum over the call's kv_len and rows,
// before the PDL wait, and cluster c takes items c, c + clusters, ... (a graph replays any mix).
#include <cooperative_groups.h>

#include <algorithm>

#include "kernels/attention/attention_decode_cuda.cuh"

namespace tandem::kernels::attn {

namespace {

namespace cg = cooperative_groups;
using namespace decode;

template <int kD, int kMT>
struct TileSmem {
  using T = Tile<kD, kMT>;
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + size_t{T::kRows} * T::kLd * 2;
  static constexpr size_t kV = kK + T::kTileBytes;
  static constexpr size_t kO = kK;  // O_t reuses the K/V region once P V is done
  static constexpr size_t kScratch = kV + T::kTileBytes;
  static constexpr size_t kSlot = kScratch + T::kScratch;
  static constexpr size_t kPrefix = kSlot + size_t{kTileN} * 4;  // then seq_prefix_bytes(n_seqs)
  static_assert(size_t{T::kRows} * T::kOLd * 4 <= 2 * T::kTileBytes, "O_t fits");
  static_assert(kPrefix % 16 == 0, "the prefix sum starts 16-byte aligned");
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
  auto* prefix = reinterpret_cast<int*>(smem_raw + L::kPrefix);

  // The work list (metadata only, set before the step: readable before the wait).
  const int n_items = work_list(p, prefix, false);
  const int cluster_id = static_cast<int>(blockIdx.x) / kTiles;
  const int n_clusters = static_cast<int>(gridDim.x) / kTiles;
  if (cluster_id >= n_items) return leave_early();  // the whole cluster
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c4 = lane & 3;
  cuda::pdl_begin();  // q and the new K/V rows are the previous kernels' outputs

  for (int item = cluster_id; item < n_items; item += n_clusters) {
    const Item w = item_at(p, prefix, item);  // the same for the whole cluster
    const int64_t pos0 = static_cast<int64_t>(w.split) * kGranule;
    const int64_t block_last = w.seq.last((w.row0 + w.n_rows - 1) / p.group);
    if (pos0 > block_last) continue;  // no row of this block sees this split
    const int end = static_cast<int>(min(w.seq.kv, min(pos0 + kGranule, block_last + 1)));
    const int tile_pos = static_cast<int>(pos0) + rank * kTileN;
    const bool active = tile_pos < end;
    // Shared memory is free: the previous item ended with a cluster barrier after every read.
    if (active) {
      int lim[kMT][2];
      row_limits<kMT>(p, w, tile_pos, 0, lim);
      load_q_and_slots<kD, kMT, kThreads>(p, w, q_s, slot_s, tile_pos, kTileN, end);
      __syncthreads();
      load_kv_tile<kD, kThreads, kTileN>(k_s, v_s, p, w.hk, slot_s);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
      float o[kMT][kNT][4], m[kMT][2], l[kMT][2];
      tile_partial<kD, kMT, 1>(q_s, k_s, v_s, scratch, lim, p.scale_log2, o, m, l);
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
    const float *m_b = m_s, *l_b = l_s, *o_b = o_s;
    opaque(m_b, l_b, o_b);
    for (int u = threadIdx.x; u < w.n_rows * kUnits; u += kThreads) {
      const int r = u / kUnits, d4 = rank * (kD / kTiles) + (u % kUnits) * 4;
      float mk[kTiles], lk[kTiles];
      float4 ok[kTiles];
#pragma unroll
      for (int k = 0; k < kTiles; ++k) {
        mk[k] = cluster.map_shared_rank(m_b, k)[r];
        lk[k] = cluster.map_shared_rank(l_b, k)[r];
        ok[k] =
            *reinterpret_cast<const float4*>(cluster.map_shared_rank(o_b, k) + r * T::kOLd + d4);
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
      const int64_t row = part_row(p, w, w.row0 + r);
      if (row < 0) continue;
      const int64_t at = row * p.max_splits + w.split;
      *reinterpret_cast<float4*>(p.part_o + at * kD + d4) = A[0];
      if (rank == 0 && u % kUnits == 0) {
        p.part_ml[at * 2] = M[0];
        p.part_ml[at * 2 + 1] = Ls[0];
      }
    }
    cluster.sync();  // keep this CTA's shared memory alive until every rank has read it
  }
}

template <int kD, int kMT>
struct RingSmem {
  using T = Tile<kD, kMT>;
  static constexpr size_t kQ = 0;
  static constexpr size_t kRing = kQ + size_t{T::kRows} * T::kLd * 2;
  // (K, V) tile pairs in the ring. 3 for 2+ m-tiles at head_dim 256 would fit beside up to 1,151
  // sequences' prefix sums, but was slower at batch 1 (nineteenth session, docs/cuda.md gap 4).
  static constexpr int kStages = kMT == 1 ? 3 : 2;
  static constexpr size_t kO = kRing;  // the half's result reuses the ring after the last tile
  static constexpr size_t kScratch = kRing + size_t{kStages} * 2 * T::kTileBytes;
  static constexpr size_t kSlot = kScratch + T::kScratch;
  static constexpr size_t kPrefix = kSlot + size_t{kHalf} * kTileN * 4;
  static_assert(size_t{T::kRows} * T::kOLd * 4 <= kStages * 2 * T::kTileBytes, "A fits");
  static_assert(kPrefix % 16 == 0, "the prefix sum starts 16-byte aligned");
};

// Warp sets of the ring kernel: two (16 warps, each set taking half the m-tiles of every tile)
// where there are two or more m-tiles, else one. At 32K and 3-9 rows 2-6% faster than 8 warps
// taking all m-tiles, and 3-4% at 8-256 sequences x 4 rows (H100, nineteenth session); the same
// bits (tile_partial).
template <int kMT>
constexpr int kRingSets = kMT >= 2 ? 2 : 1;

template <int kD, int kMT>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads* kRingSets<kMT>, 1)
    attention_ring_kernel(AttnParams p) {
  using T = Tile<kD, kMT>;
  using L = RingSmem<kD, kMT>;
  constexpr int kSets = kRingSets<kMT>, kS = L::kStages;
  // One m-tile: the item's Q fragments stay in registers from its first tile on instead of every
  // warp reading them from shared memory for every tile (1-4% faster on decode-row calls, H100,
  // nineteenth session; 2+ m-tiles have no registers to spare at 16 warps).
  constexpr bool kQRegs = kMT == 1;
  constexpr int kNT = T::kNT, kOwn = kMT / kSets, kBlock = kThreads * kSets;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kQ);
  auto* ring = reinterpret_cast<__nv_bfloat16*>(smem_raw + L::kRing);
  auto* o_s = reinterpret_cast<float*>(smem_raw + L::kO);
  unsigned char* scratch = smem_raw + L::kScratch;
  auto* m_s = reinterpret_cast<float*>(scratch + T::kM);
  auto* l_s = reinterpret_cast<float*>(scratch + T::kL);
  auto* slot_s = reinterpret_cast<int32_t*>(smem_raw + L::kSlot);
  auto* prefix = reinterpret_cast<int*>(smem_raw + L::kPrefix);
  constexpr size_t kTileElems = T::kTileBytes / 2;

  // The work list (metadata only, set before the step: readable before the wait).
  const int n_items = work_list(p, prefix, true);
  const int cluster_id = static_cast<int>(blockIdx.x) / 2;
  const int n_clusters = static_cast<int>(gridDim.x) / 2;
  if (cluster_id >= n_items) return leave_early();  // the whole cluster
  cg::cluster_group cluster = cg::this_cluster();
  const int half = static_cast<int>(cluster.block_rank());
  const int warp = static_cast<int>(threadIdx.x >> 5) % kWarps, lane = threadIdx.x & 31;
  const int g = lane >> 2, c4 = lane & 3, mt0 = own_mt0<kMT, kSets>();
  cuda::pdl_begin();  // q and the new K/V rows are the previous kernels' outputs

  for (int item = cluster_id; item < n_items; item += n_clusters) {
    const Item w = item_at(p, prefix, item);  // the same for the whole cluster
    const int64_t pos0 = static_cast<int64_t>(w.split) * kGranule;
    const int64_t block_last = w.seq.last((w.row0 + w.n_rows - 1) / p.group);
    if (pos0 > block_last) continue;  // no row of this block sees this split
    const int end = static_cast<int>(min(w.seq.kv, min(pos0 + kGranule, block_last + 1)));
    const int half_pos = static_cast<int>(pos0) + half * kHalf * kTileN;
    const int n_my = max(0, min(kHalf, (end - half_pos + kTileN - 1) / kTileN));

    // Shared memory is free: the previous item ended with a cluster barrier after every read, and
    // with no cp.async in flight.
    load_q_and_slots<kD, kMT, kBlock>(p, w, q_s, slot_s, half_pos, kHalf * kTileN, end);
    __syncthreads();
    auto issue = [&](int i) {  // tile i of this half into stage i % kS (q rides in group 0)
      if (i < n_my) {
        __nv_bfloat16* st = ring + (i % kS) * 2 * kTileElems;
        load_kv_tile<kD, kBlock, kTileN>(st, st + kTileElems, p, w.hk, slot_s + i * kTileN);
      }
      cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < kS - 1; ++i) issue(i);
    int lim0[kOwn][2];
    row_limits<kOwn>(p, w, half_pos, mt0, lim0);
    float A[kOwn][kNT][4], M[kOwn][2], Ls[kOwn][2];
#pragma unroll
    for (int mt = 0; mt < kOwn; ++mt) {
      M[mt][0] = M[mt][1] = -INFINITY, Ls[mt][0] = Ls[mt][1] = 0.f;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        A[mt][nt][0] = A[mt][nt][1] = A[mt][nt][2] = A[mt][nt][3] = 0.f;
    }
    uint32_t q_regs[kQRegs ? kOwn : 1][T::kKSteps][4];
    for (int i = 0; i < n_my; ++i) {
      cp_async_wait<kS - 2>();
      __syncthreads();  // tile i landed; stage (i - 1) % kS is free
      issue(i + kS - 1);
      if constexpr (kQRegs) {
        if (i == 0) load_q_frags<kD, kMT, kOwn>(q_s, mt0, q_regs);  // q landed with tile 0
      }
      int lim[kOwn][2];
#pragma unroll
      for (int mt = 0; mt < kOwn; ++mt)
        lim[mt][0] = lim0[mt][0] - i * kTileN, lim[mt][1] = lim0[mt][1] - i * kTileN;
      const __nv_bfloat16* st = ring + (i % kS) * 2 * kTileElems;
      float o[kOwn][kNT][4], m[kOwn][2], l[kOwn][2];
      tile_partial<kD, kMT, kSets, kQRegs>(q_s, st, st + kTileElems, scratch, lim, p.scale_log2, o,
                                           m, l, q_regs);
#pragma unroll
      for (int mt = 0; mt < kOwn; ++mt) {
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
    for (int mt = 0; mt < kOwn; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = (mt0 + mt) * 16 + g + 8 * h;
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
    const float *m_b = m_s, *l_b = l_s, *o_b = o_s;
    opaque(m_b, l_b, o_b);
    const float* m_src[2] = {cluster.map_shared_rank(m_b, 0), cluster.map_shared_rank(m_b, 1)};
    const float* l_src[2] = {cluster.map_shared_rank(l_b, 0), cluster.map_shared_rank(l_b, 1)};
    const float* o_src[2] = {cluster.map_shared_rank(o_b, 0), cluster.map_shared_rank(o_b, 1)};
    for (int u = threadIdx.x; u < w.n_rows * kUnits; u += kBlock) {
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
      const int64_t row = part_row(p, w, w.row0 + r);
      if (row < 0) continue;
      const int64_t at = row * p.max_splits + w.split;
      *reinterpret_cast<float4*>(p.part_o + at * kD + d4) = A0;
      if (half == 0 && u % kUnits == 0) {
        p.part_ml[at * 2] = M0;
        p.part_ml[at * 2 + 1] = L0;
      }
    }
    cluster.sync();  // keep this CTA's shared memory alive until the other has read it
  }
}

// Clusters of `kernel` that fit on the GPU at once (its persistent grid), with the shared-memory
// opt-in for up to kMaxSeqs sequences. Called once per instantiation (one device per process).
template <typename Kernel>
int64_t resident_clusters(Kernel kernel, size_t smem, unsigned cluster, int threads) {
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cluster, 1, 1);
  cfg.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
  cfg.dynamicSmemBytes = smem;
  int n = 0;  // the cluster shape is the kernel's own (__cluster_dims__)
  TANDEM_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
  return std::max(n, 1);
}

template <int kD, int kMT>
void launch(AttnParams p, int64_t max_rows, cudaStream_t s) {
  constexpr size_t ring_smem = RingSmem<kD, kMT>::kPrefix, tile_smem = TileSmem<kD, kMT>::kPrefix;
  static_assert(ring_smem + seq_prefix_bytes(kMaxSeqs) + 256 <= kSmemPerBlock, "ring smem");
  static_assert(tile_smem + seq_prefix_bytes(kMaxSeqs) + 256 <= kSmemPerBlock, "tile smem");
  constexpr int ring_threads = kThreads * kRingSets<kMT>;
  auto* ring = attention_ring_kernel<kD, kMT>;
  auto* tile = attention_tile_kernel<kD, kMT>;
  static const int64_t ring_clusters =
      resident_clusters(ring, ring_smem + seq_prefix_bytes(kMaxSeqs), 2, ring_threads);
  static const int64_t tile_clusters =
      resident_clusters(tile, tile_smem + seq_prefix_bytes(kMaxSeqs), kTiles, kThreads);
  p.row_block = 16 * kMT;
  p.tile_budget = static_cast<int>(tile_clusters);
  const size_t prefix = seq_prefix_bytes(p.n_seqs);
  // Items per split over all sequences, at most (host bounds: the grids never read the step).
  const int64_t per_split =
      p.n_seqs * int64_t{p.hkv} * cuda::ceil_div(max_rows * p.group, p.row_block);
  const int64_t tile_splits = std::min<int64_t>(p.max_splits, kRingMinKv / kGranule);
  // Each kernel's blocks leave at once when the other takes every sequence (work_list). The ring
  // kernel runs when a table row reaches past kRingMinKv positions or the tile kernel's work may
  // exceed its budget, and goes first (on the H200 the other order cost a lone 8K-32K sequence
  // 1-3 us). Graphs: both grids depend on host bounds only.
  if (p.capacity > kRingMinKv || per_split * tile_splits > p.tile_budget) {
    const int64_t ring_grid = std::clamp<int64_t>(per_split * p.max_splits, 1, ring_clusters);
    cuda::launch_pdl(ring, dim3(static_cast<unsigned>(2 * ring_grid)), ring_threads,
                     ring_smem + prefix, s, p);
    cuda::check_launch("attention_ring_kernel");
  }
  const int64_t clusters = std::clamp<int64_t>(per_split * tile_splits, 1, tile_clusters);
  cuda::launch_pdl(tile, dim3(static_cast<unsigned>(kTiles * clusters)), kThreads,
                   tile_smem + prefix, s, p);
  cuda::check_launch("attention_tile_kernel");
}

}  // namespace

void launch_decode(AttnParams p, int head_dim, int64_t max_rows, cudaStream_t s) {
  // 16-row m-tiles per work item, for the largest sequence the host allows: a padding row costs
  // arithmetic but changes no other row's bits, so this depends on the bound, not the step.
  const int64_t rows = max_rows * p.group;  // (row, q head) pairs of one sequence and kv head
  const int mt = rows <= 16 ? 1 : (rows <= 32 ? 2 : 4);
  if (head_dim == 64)
    mt == 1 ? launch<64, 1>(p, max_rows, s)
            : (mt == 2 ? launch<64, 2>(p, max_rows, s) : launch<64, 4>(p, max_rows, s));
  if (head_dim == 128)
    mt == 1 ? launch<128, 1>(p, max_rows, s)
            : (mt == 2 ? launch<128, 2>(p, max_rows, s) : launch<128, 4>(p, max_rows, s));
  if (head_dim == 256)
    mt == 1 ? launch<256, 1>(p, max_rows, s)
            : (mt == 2 ? launch<256, 2>(p, max_rows, s) : launch<256, 4>(p, max_rows, s));
}

}  // namespace tandem::kernels::attn
