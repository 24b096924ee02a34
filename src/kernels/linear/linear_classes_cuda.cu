// Decode/verify linear for large batches (production: more than kBatchMaxTokens decode rows in one
// launch): the persistent kernel's arithmetic (linear_persistent_cuda.cu) with its 8 warp classes
// spread over the 8 blocks of a thread-block cluster, so that one pass over the weights serves up
// to kClassesMaxTokens rows. The batched kernel (linear_batch_cuda.cu) holds every class of an
// output in one block, 8 accumulators per output, which caps its tile at 64 x 32 and makes every
// 64 rows one more pass over the weights; here a block holds one class of a 128..256-row x
// 32..128-token tile, the cluster adds the 8 class sums of each output in the persistent kernel's
// order through distributed shared memory, and a 256-row step reads the weights about once.
//
// Same bits as the persistent kernel, by construction:
//  - the plan (plan_linear of the 16-row tiles, production's occupancy): `splits` k ranges of
//    range_k, masked_end = linear_masked_end(len) per range;
//  - class c (block rank c) runs the 32-k steps c, c + 8, ... < masked_end / 32 of each range in
//    increasing order, each as the same two mma.sync m16n8k16 with the same fragment loads (lane
//    (g, t): 8 consecutive k at 8t of rows g, g + 8 and of token g), lanes whose k is past the
//    range's end with zero operands, steps past the range's length all zeros;
//  - the range sum ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)), the ranks' sums added in
//    rank order, input_rms's scale (the same sums of squares, sum_squares), then the store.
// Which block reduces an output, and how many tokens or rows share a tile, changes no addition.
//
// Copies: tensor maps, one box of 32 k x the tile's rows per step for the weights and one for the
// tokens (64-byte rows: the fragment loads are conflict-free), counted on the stage's mbarrier;
// k past `in`, rows past out_f and tokens past n_tokens arrive as zeros. A producer warp runs
// ahead across the cluster's tiles and ranges; 8 consumer warps split the tile; the rms warp sums
// the squares of the tokens this block stores. Each block stores a share of its tile's tokens.
// Measured (H200, docs/cuda.md known gap 6): boxes of 64-byte rows fill shared memory at only
// 2.4-3.0 TB/s in all, and the exchange costs about as much consumer time as the mma loop, so this
// kernel streams 2.0-3.1 TB/s at 1..64 rows (production keeps the persistent and batched kernels
// there) and 115-175 TFLOP/s at 128-256 rows.
#include <algorithm>
#include <array>
#include <type_traits>

#include "kernels/linear/linear_decode_common.cuh"
#include "kernels/linear/linear_plan.h"
#include "kernels/tensor_map_cuda.cuh"

namespace tandem::kernels {

namespace {

using namespace decode_linear;  // NOLINT: the shared pieces of the decode kernels
using cuda::mbar_wait;

constexpr int kClasses = kConsumerWarps;  // the 8 warp classes: a cluster's blocks
constexpr int kStepK = 32;                // k per step (one 16-byte fragment per lane)
constexpr int kConsumerThreads = kConsumerWarps * 32;
constexpr uint32_t kReduceBarrier = 1;  // consumer warps (256)
constexpr uint32_t kScaleBarrier = 2;   // rms warp -> consumers (288)

// kMTile weight rows x kNTile tokens per tile, kWarpsM x (8 / kWarpsM) consumer warps over it,
// kSteps steps per ring stage, kStages stages.
template <int kMTile_, int kNTile_, int kWarpsM_, int kSteps_, int kStages_>
struct ClassCfg {
  static constexpr int kMTile = kMTile_, kNTile = kNTile_, kWarpsM = kWarpsM_;
  static constexpr int kWarpsN = kConsumerWarps / kWarpsM;
  static constexpr int kSteps = kSteps_, kStages = kStages_;
  static constexpr int kWM = kMTile / kWarpsM / 16;  // m16 tiles per warp
  static constexpr int kWN = kNTile / kWarpsN / 8;   // n8 tiles per warp
  static constexpr int kPitch = kMTile + 4;  // floats per token row of `recv`: 4 mod 32 banks
  static constexpr int kShare = kNTile / kClasses;  // tokens each block reduces and stores
  // A reduction unit: one token, 4 rows of a 16-row tile and the 4 rows 8 below.
  static constexpr int kUnits = kShare * (kMTile / 16) * 2;
  static constexpr int kUnitsPerThread = (kUnits + kConsumerThreads - 1) / kConsumerThreads;
  static_assert(kWM >= 1 && kWN >= 1 && kMTile % (16 * kWarpsM) == 0 && kNTile % kClasses == 0);
  static_assert(kMTile <= 256 && kNTile <= 256, "a box's sides are <= 256");
};

template <class C>
struct ClassStage {
  __nv_bfloat16 w[C::kSteps][C::kMTile][kStepK];
  __nv_bfloat16 x[C::kSteps][C::kNTile][kStepK];
};

template <class C>
struct ClassSmem {
  ClassStage<C> ring[C::kStages];  // first: 128-byte aligned (tensor-map boxes)
  // Every block's class sums of this block's share of the tile (current tile and range), pushed
  // by their blocks: recv[class][token of the share][slot], row 16 T + i at slot 16 T + 2 i and
  // row 16 T + 8 + i at slot 16 T + 2 i + 1 (i < 8): one 8-byte store per mma row pair.
  float recv[kClasses][C::kShare][C::kPitch];
  uint64_t full[C::kStages], empty[C::kStages];
  uint64_t ready;  // every block has pushed its sums into recv (8 arrivals, one per block)
  uint64_t freed;  // every block has read its recv (8 arrivals): the next push may go
  float sumsq[kClassesMaxTokens / kClasses];  // input_rms: this block's tokens of every token tile
};

struct ClassParams {
  Params p;       // tiles: 16-row tiles (the plan's); clusters: unused
  CUtensorMap w;  // box [32, kMTile]
  CUtensorMap x;  // box [32, kNTile]
  // Items (row tile m, token tile n) in row-major order i = m n_tiles + n; cluster c takes
  // [c items / clusters, (c + 1) items / clusters): the token tiles of a row tile back to back,
  // so that its weights come from L2 after the first.
  int m_tiles, n_tiles, items, clusters;
};

enum class ClassStore { kBf16, kF32, kSwiGluPairs, kAddToOut };

// An 8-byte store to the shared memory of block `rank` of this cluster at this block's shared
// address `addr` (mapa: the same offset in the other block's window); no wait for completion.
__device__ __forceinline__ void store_remote(uint32_t addr, int rank, float v0, float v1) {
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
      " st.shared::cluster.v2.f32 [remote], {%2, %3};\n}\n" ::"r"(addr),
      "r"(rank), "f"(v0), "f"(v1)
      : "memory");
}

// A rank's k range and its class-c steps: `loaded` of them touch the range (copied), `total` run
// (production's 1024-k chunks: masked_end / 256 per class).
struct RankSteps {
  int64_t k_begin, k_end;
  int loaded, total;
};
__device__ __forceinline__ RankSteps rank_steps(const Params& p, int rank, int cls) {
  RankSteps r;
  r.k_begin = rank * p.range_k;
  r.k_end = min(p.in, r.k_begin + p.range_k);
  const int64_t len = max(r.k_end - r.k_begin, int64_t{0});
  const int64_t steps = (len + kStepK - 1) / kStepK;  // steps touching the range
  r.loaded = static_cast<int>(steps > cls ? (steps - cls + kClasses - 1) / kClasses : 0);
  r.total = static_cast<int>(linear_masked_end(len) / (kStepK * kClasses));
  return r;
}

template <class C, ClassStore kStore>
__global__ void __launch_bounds__(kThreads, 1)
    linear_classes_kernel(const __grid_constant__ ClassParams cp) {
  constexpr int kMTile = C::kMTile, kNTile = C::kNTile, kSteps = C::kSteps;
  const Params& p = cp.p;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<ClassSmem<C>*>(smem_raw);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int cls = static_cast<int>(blockIdx.x % kClasses);  // the block's rank in its cluster
  const int cluster_id = static_cast<int>(blockIdx.x / kClasses);
  const int item_begin =
      static_cast<int>(static_cast<int64_t>(cluster_id) * cp.items / cp.clusters);
  const int item_end =
      static_cast<int>(static_cast<int64_t>(cluster_id + 1) * cp.items / cp.clusters);
  const int share0 = cls * C::kShare;  // this block's tokens in a token tile

  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      cuda::mbar_init(&sm.full[s], 1);
      cuda::mbar_init(&sm.empty[s], kConsumerWarps);
    }
    cuda::mbar_init(&sm.ready, kClasses);
    cuda::mbar_init(&sm.freed, kClasses);
    cuda::fence_mbar_init();
  }
  __syncthreads();
  cg::this_cluster().barrier_arrive();  // remote arrivals wait for every block's barriers

  if (warp == kRmsWarp) {
    cg::this_cluster().barrier_wait();
    if (p.input_rms) {
      cuda::pdl_begin();  // x is the previous kernel's output
      // This block's tokens of each token tile its items touch (consecutive items: consecutive
      // tiles, mod n_tiles).
      const int touched = min(item_end - item_begin, cp.n_tiles);
      for (int i = item_begin; i < item_begin + touched; ++i) {
        const int nt = i % cp.n_tiles;
        const int64_t first = static_cast<int64_t>(nt) * kNTile + share0;
        const int n_share =
            static_cast<int>(min(int64_t{C::kShare}, static_cast<int64_t>(p.n_tokens) - first));
        if (n_share <= 0) continue;
        Params q = p;
        q.x = p.x + first * p.x_stride;
        q.n_tokens = n_share;
        sum_squares<16>(q, lane, sm.sumsq + nt * C::kShare);
      }
      cuda::named_barrier_arrive(kScaleBarrier, kConsumerThreads + 32);
    }
  } else if (warp == kProducerWarp) {
    cg::this_cluster().barrier_wait();  // (the barrier is warp-aligned: every lane, here)
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&cp.w))
                   : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&cp.x))
                   : "memory");
      // Stage it: steps [j0, j0 + n) of class cls in rank r of row tile m. The first kStages
      // stages' weights go out before the previous kernel has finished (weights are never
      // written by a step), their tokens after its end; then each stage once it is free.
      uint32_t it = 0;
      const auto stages = [&](auto&& fn) {
        for (int i = item_begin; i < item_end; ++i) {
          const int m = i / cp.n_tiles;
          const int64_t n0 = static_cast<int64_t>(i % cp.n_tiles) * kNTile;
          for (int r = 0; r < p.splits; ++r) {
            const RankSteps rs = rank_steps(p, r, cls);
            for (int j0 = 0; j0 < rs.loaded; j0 += kSteps) {
              if (!fn(m, n0, rs.k_begin, j0, min(kSteps, rs.loaded - j0))) return;
            }
          }
        }
      };
      const auto k_of = [&](int64_t k_begin, int j) {
        return k_begin + static_cast<int64_t>(cls + kClasses * j) * kStepK;
      };
      const uint32_t stage_bytes = (kMTile + kNTile) * kStepK * 2;
      stages([&](int m, int64_t, int64_t k_begin, int j0, int n) {
        if (it >= static_cast<uint32_t>(C::kStages)) return false;
        cuda::mbar_arrive_expect_tx(&sm.full[it], stage_bytes * static_cast<uint32_t>(n));
        for (int s = 0; s < n; ++s) {
          cuda::tensor_load_2d(&sm.ring[it].w[s][0][0], &cp.w, k_of(k_begin, j0 + s),
                               static_cast<int64_t>(m) * kMTile, &sm.full[it]);
        }
        ++it;
        return true;
      });
      const uint32_t pre = it;
      cuda::pdl_begin();
      it = 0;
      stages([&](int m, int64_t n0, int64_t k_begin, int j0, int n) {
        const uint32_t slot = it % C::kStages, round = it / C::kStages;
        if (it >= pre) {
          if (round > 0) mbar_wait(&sm.empty[slot], (round - 1) & 1);
          cuda::mbar_arrive_expect_tx(&sm.full[slot], stage_bytes * static_cast<uint32_t>(n));
          for (int s = 0; s < n; ++s) {
            cuda::tensor_load_2d(&sm.ring[slot].w[s][0][0], &cp.w, k_of(k_begin, j0 + s),
                                 static_cast<int64_t>(m) * kMTile, &sm.full[slot]);
          }
        }
        for (int s = 0; s < n; ++s) {
          cuda::tensor_load_2d(&sm.ring[slot].x[s][0][0], &cp.x, k_of(k_begin, j0 + s), n0,
                               &sm.full[slot]);
        }
        ++it;
        return true;
      });
    }
  } else {
    cg::this_cluster().barrier_wait();
    cuda::pdl_begin();  // before writing `out`, which the previous kernel may read
    const int g = lane >> 2, t = lane & 3;
    const int row0 = (warp % C::kWarpsM) * C::kWM * 16;  // the warp's rows and tokens in the tile
    const int tok0 = (warp / C::kWarpsM) * C::kWN * 8;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    // recv[cls] in every block: this block's slice of each owner's receive buffer.
    const uint32_t recv_base = cuda::smem_u32(&sm.recv[cls][0][0]);
    uint32_t it = 0, use = 0;
    bool rms_in = false;
    for (int i = item_begin; i < item_end; ++i) {
      const int m = i / cp.n_tiles, nt = i % cp.n_tiles;
      const int64_t n0 = static_cast<int64_t>(nt) * kNTile;  // the item's first token
      float total[C::kUnitsPerThread][8];
      for (int r = 0; r < p.splits; ++r, ++use) {
        const RankSteps rs = rank_steps(p, r, cls);
        float c[C::kWM][C::kWN][4];
#pragma unroll
        for (int mi = 0; mi < C::kWM; ++mi) {
#pragma unroll
          for (int ni = 0; ni < C::kWN; ++ni) {
#pragma unroll
            for (int q = 0; q < 4; ++q) c[mi][ni][q] = 0.f;
          }
        }
        for (int j0 = 0; j0 < rs.loaded; j0 += kSteps, ++it) {
          const uint32_t slot = it % C::kStages, round = it / C::kStages;
          mbar_wait(&sm.full[slot], round & 1);
          const ClassStage<C>& src = sm.ring[slot];
#pragma unroll
          for (int s = 0; s < kSteps; ++s) {
            const int j = j0 + s;
            if (j >= rs.loaded) break;
            const int64_t k0 = rs.k_begin + static_cast<int64_t>(cls + kClasses * j) * kStepK;
            // Lanes whose k is past the range (the next rank's k) take zero operands; a step inside
            // the range for every lane loads without the per-lane selects (measured 1-2% faster).
            const auto step = [&](auto all_ok) {
              const bool ok = decltype(all_ok)::value || k0 + 8 * t < rs.k_end;
              const auto frag = [&](const __nv_bfloat16* at) {
                return ok ? *reinterpret_cast<const uint4*>(at) : zero;
              };
              uint4 xv[C::kWN];
#pragma unroll
              for (int ni = 0; ni < C::kWN; ++ni) {
                xv[ni] = frag(&src.x[s][tok0 + ni * 8 + g][8 * t]);
              }
              uint4 pa[C::kWM], pb[C::kWM];  // rows g and g + 8 of each m16 tile
#pragma unroll
              for (int mi = 0; mi < C::kWM; ++mi) {
                const int row = row0 + mi * 16 + g;
                pa[mi] = frag(&src.w[s][row][8 * t]);
                pb[mi] = frag(&src.w[s][row + 8][8 * t]);
              }
              // Every accumulator's first mma of the step, then every second one: each output
              // still adds its step's two halves in order, and no mma waits for the one before.
#pragma unroll
              for (int mi = 0; mi < C::kWM; ++mi) {
#pragma unroll
                for (int ni = 0; ni < C::kWN; ++ni) {
                  mma_bf16(c[mi][ni], pa[mi].x, pb[mi].x, pa[mi].y, pb[mi].y, xv[ni].x, xv[ni].y);
                }
              }
#pragma unroll
              for (int mi = 0; mi < C::kWM; ++mi) {
#pragma unroll
                for (int ni = 0; ni < C::kWN; ++ni) {
                  mma_bf16(c[mi][ni], pa[mi].z, pb[mi].z, pa[mi].w, pb[mi].w, xv[ni].z, xv[ni].w);
                }
              }
            };
            if (k0 + 24 < rs.k_end) {
              step(std::true_type{});
            } else {
              step(std::false_type{});
            }
          }
          cuda::release_slot(&sm.empty[slot], lane);
        }
        // The steps production runs past the range's length, with zero operands (the end of its
        // last 1024-k chunk).
        for (int j = rs.loaded; j < rs.total; ++j) {
#pragma unroll
          for (int mi = 0; mi < C::kWM; ++mi) {
#pragma unroll
            for (int ni = 0; ni < C::kWN; ++ni) {
              mma_bf16(c[mi][ni], 0u, 0u, 0u, 0u, 0u, 0u);
              mma_bf16(c[mi][ni], 0u, 0u, 0u, 0u, 0u, 0u);
            }
          }
        }

        // Push this class's sums to the blocks that own their tokens (once every block has read
        // the previous push), then add the 8 classes of this block's share in the persistent
        // kernel's order. One thread waits (acquiring at cluster scope) and a CTA barrier
        // passes it on; 8 lanes arrive, one remote block each, in parallel.
        if (use > 0) {
          if (threadIdx.x == 0) cuda::mbar_wait_cluster(&sm.freed, (use - 1) & 1);
          cuda::named_barrier(kReduceBarrier, kConsumerThreads);
        }
#pragma unroll
        for (int mi = 0; mi < C::kWM; ++mi) {
#pragma unroll
          for (int ni = 0; ni < C::kWN; ++ni) {
#pragma unroll
            for (int q = 0; q < 2; ++q) {  // token 2t + q: rows g and g + 8 side by side
              const int slot = row0 + mi * 16 + 2 * g;
              const int tok = tok0 + ni * 8 + 2 * t + q;
              const uint32_t at =
                  recv_base + static_cast<uint32_t>(((tok % C::kShare) * C::kPitch + slot) * 4);
              store_remote(at, tok / C::kShare, c[mi][ni][q], c[mi][ni][q + 2]);
            }
          }
        }
        cuda::named_barrier(kReduceBarrier, kConsumerThreads);
        if (threadIdx.x < kClasses) cuda::mbar_arrive_cluster(&sm.ready, threadIdx.x);
        if (threadIdx.x == 0) cuda::mbar_wait_cluster(&sm.ready, use & 1);
        cuda::named_barrier(kReduceBarrier, kConsumerThreads);
#pragma unroll
        for (int u = 0; u < C::kUnitsPerThread; ++u) {
          const int unit = static_cast<int>(threadIdx.x) + u * kConsumerThreads;
          if (unit >= C::kUnits) break;
          const int tile16 = (unit >> 1) % (kMTile / 16), ts = (unit >> 1) / (kMTile / 16);
          // The unit's rows 16 T + 4 h + i and 16 T + 4 h + i + 8 (i < 4) sit at slots
          // 16 T + 8 h + 2 i and + 1: its 8 sums are two float4s, in the order l = 2 i + hi,
          // y index e = i + 4 hi.
          const int slot = tile16 * 16 + (unit & 1) * 8;
          // Classes b and b + 1's sums of the unit's 8 outputs, added: the tree's first level.
          const auto pair_sum = [&](int b, float(&out)[8]) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float4 a = *reinterpret_cast<const float4*>(&sm.recv[b][ts][slot + 4 * h]);
              const float4 d = *reinterpret_cast<const float4*>(&sm.recv[b + 1][ts][slot + 4 * h]);
              out[4 * h + 0] = a.x + d.x;
              out[4 * h + 1] = a.y + d.y;
              out[4 * h + 2] = a.z + d.z;
              out[4 * h + 3] = a.w + d.w;
            }
          };
          float s01[8], s23[8], s45[8], s67[8];
          pair_sum(0, s01);
          pair_sum(2, s23);
#pragma unroll
          for (int l = 0; l < 8; ++l) s01[l] += s23[l];  // (c0 + c1) + (c2 + c3)
          pair_sum(4, s45);
          pair_sum(6, s67);
#pragma unroll
          for (int l = 0; l < 8; ++l) {
            const float range_sum = s01[l] + (s45[l] + s67[l]);
            const int e = (l >> 1) + 4 * (l & 1);
            total[u][e] = r == 0 ? range_sum : total[u][e] + range_sum;
          }
        }
        cuda::named_barrier(kReduceBarrier, kConsumerThreads);  // every read of recv is done
        if (threadIdx.x < kClasses) cuda::mbar_arrive_cluster(&sm.freed, threadIdx.x);
      }

      // The store of this block's share: input_rms's scale, then the epilogue.
      float scale[C::kUnitsPerThread] = {};
      if (p.input_rms) {
        if (!rms_in) {  // the rms warp's sums are in
          cuda::named_barrier(kScaleBarrier, kConsumerThreads + 32);
          rms_in = true;
        }
#pragma unroll
        for (int u = 0; u < C::kUnitsPerThread; ++u) {
          const int unit = static_cast<int>(threadIdx.x) + u * kConsumerThreads;
          const int ts = min((unit >> 1) / (kMTile / 16), C::kShare - 1);
          if (n0 + share0 + ts >= p.n_tokens) continue;  // not stored
          scale[u] = inverse_rms_of(p, sm.sumsq[nt * C::kShare + ts]);
        }
      }
#pragma unroll
      for (int u = 0; u < C::kUnitsPerThread; ++u) {
        const int unit = static_cast<int>(threadIdx.x) + u * kConsumerThreads;
        if (unit >= C::kUnits) break;
        const int tile16 = (unit >> 1) % (kMTile / 16), ts = (unit >> 1) / (kMTile / 16);
        const int64_t tok = n0 + share0 + ts;
        if (tok >= p.n_tokens) continue;
        float y[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) y[e] = p.input_rms ? total[u][e] * scale[u] : total[u][e];
        // y[e]: row 16 T + 4 h + (e & 3) + (e >= 4 ? 8 : 0) of 16-row tile T
        const int64_t t16 = static_cast<int64_t>(m) * (kMTile / 16) + tile16;
        const int h = unit & 1;
        if constexpr (kStore == ClassStore::kSwiGluPairs) {
          if (t16 * 16 >= p.out_f) continue;
          auto* out = static_cast<__nv_bfloat16*>(p.out) + tok * p.out_stride +
                      t16 * kSwigluPairGroup + 4 * h;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            out[i] = cuda::swiglu_bf16(__float2bfloat16_rn(y[i]), __float2bfloat16_rn(y[i + 4]));
          }
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const int64_t row = t16 * 16 + 4 * h + (e & 3) + (e >= 4 ? 8 : 0);
            if (row >= p.out_f) continue;
            const int64_t at = tok * p.out_stride + row;
            if constexpr (kStore == ClassStore::kF32) {
              static_cast<float*>(p.out)[at] = y[e];
            } else if constexpr (kStore == ClassStore::kBf16) {
              static_cast<__nv_bfloat16*>(p.out)[at] = __float2bfloat16_rn(y[e]);
            } else {
              auto* out = static_cast<__nv_bfloat16*>(p.out);
              out[at] = add_to_out(__bfloat162float(out[at]), y[e]);
            }
          }
        }
      }
    }
    // No block leaves while another may still arrive on its barriers: every block has read its
    // last push (so every push and arrival on `ready` is done) and arrived on `freed`.
    if (use > 0 && threadIdx.x == 0) cuda::mbar_wait_cluster(&sm.freed, (use - 1) & 1);
  }
}

// ---- host side ----

// Clusters of 8 blocks of this instantiation that fit on the GPU at once (measured once).
template <class C, ClassStore kStore>
int64_t resident_clusters8() {
  static const int64_t n = [] {
    const int smem = static_cast<int>(sizeof(ClassSmem<C>));
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(linear_classes_kernel<C, kStore>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return measure_resident_clusters(linear_classes_kernel<C, kStore>, smem)[3];
  }();
  return n;
}

template <class C, ClassStore kStore>
bool launch_classes_cfg(const LinearShape& s, cudaStream_t stream) {
  static_assert(sizeof(ClassSmem<C>) <= 227 * 1024, "shared memory of one block on sm_90");
  const int64_t tiles = (s.out_f + kRows - 1) / kRows;
  const LinearPlan plan =
      plan_linear(tiles, s.in, kLinearPlanChunkK, linear_plan_resident(), cuda::sm_count());
  const int64_t resident = resident_clusters8<C, kStore>();
  if (resident < 1) return false;
  ClassParams cp{};
  cp.p = decode_params(s, plan, 1);
  cp.m_tiles = static_cast<int>((s.out_f + C::kMTile - 1) / C::kMTile);
  cp.n_tiles = static_cast<int>((s.n + C::kNTile - 1) / C::kNTile);
  cp.items = cp.m_tiles * cp.n_tiles;
  cp.clusters = static_cast<int>(std::min<int64_t>(resident, cp.items));
  if (!linear_encode_rows(&cp.w, s.w, s.out_f, s.in, s.in, kStepK, C::kMTile) ||
      !linear_encode_rows(&cp.x, s.x, s.n, s.in, s.x_stride, kStepK, C::kNTile)) {
    return false;
  }
  cuda::launch_pdl_cluster(linear_classes_kernel<C, kStore>,
                           static_cast<unsigned>(cp.clusters * kClasses), kThreads, kClasses,
                           sizeof(ClassSmem<C>), stream, cp);
  return true;
}

int g_classes_form = 0;  // linear_classes_set_form

// The tile by token count: 256 rows x 32 tokens (5 stages: the ring keeps ~160 KB of weights in
// flight per SM at memory-bound row counts), 256 x 64 (4 stages), 128 x 128 beyond (a token
// tile of 128 at a time, its weights read once per 128 tokens: from L2 after the first).
template <ClassStore kStore>
bool launch_classes(const LinearShape& s, cudaStream_t stream) {
  if (s.n <= 32) return launch_classes_cfg<ClassCfg<256, 32, 8, 2, 5>, kStore>(s, stream);
  if (s.n <= 64) return launch_classes_cfg<ClassCfg<256, 64, 4, 2, 4>, kStore>(s, stream);
  if (g_classes_form == 1) {  // 1-step stages: ptxas sinks the mma below the slot's release
    return launch_classes_cfg<ClassCfg<128, 128, 2, 1, 4>, kStore>(s, stream);
  }
  return launch_classes_cfg<ClassCfg<128, 128, 2, 2, 4>, kStore>(s, stream);
}

}  // namespace

int linear_classes_set_form(int form) {
  if (form >= 0 && form < kLinearClassesForms) g_classes_form = form;
  return g_classes_form;
}

bool linear_decode_classes(const LinearShape& s, bool f32_out, cudaStream_t stream) {
  if (!s.vec_ok || s.n < 1 || s.n > kClassesMaxTokens) return false;
  if (s.epilogue == LinearEpilogue::kSwiGluPairs) {
    if (s.out_f % kRows != 0) return false;
    return launch_classes<ClassStore::kSwiGluPairs>(s, stream);
  }
  if (s.epilogue == LinearEpilogue::kAddToOut) {
    return launch_classes<ClassStore::kAddToOut>(s, stream);
  }
  return f32_out ? launch_classes<ClassStore::kF32>(s, stream)
                 : launch_classes<ClassStore::kBf16>(s, stream);
}

}  // namespace tandem::kernels
