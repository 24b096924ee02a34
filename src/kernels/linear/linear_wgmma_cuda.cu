// Decode/verify linear on wgmma (Hopper's warpgroup tensor-core instruction), for many rows: the
// persistent kernel's arithmetic (linear_persistent_cuda.cu) with each 64-row x 64-token tile's
// 8 warp classes held by 4 warpgroups, two classes each, so that one block computes whole tiles
// without the class-split kernel's cluster exchange, and the tensor cores read the tokens from
// shared memory themselves.
//
// Same bits as the persistent kernel. bench/probes/mma_bits_probe.cu showed on the H200 that
// wgmma m64nNk16 with A from registers gives mma.sync m16n8k16's bits for every N, chained, and
// that the tensor cores' sum of a k16 step does not depend on the order of its 16 products, only
// on which 16 they are. The decode kernels load each lane's 8 consecutive k of a 32-k step with one
// 16-byte load and give .x/.y to the step's first mma and .z/.w to its second, so the first sums k
// {0-3, 8-11, 16-19, 24-27} of the step and the second the rest. Here:
//  - A (the weights) comes from registers loaded exactly so: warp i of a warpgroup holds rows
//    16 i + g and 16 i + g + 8 of the tile, as an m16 tile of the decode kernels does;
//  - B (the tokens) comes from shared memory, where each 32-k group of a token is stored with its
//    16 bf16 pairs transposed as a 4 x 4 matrix (pair 4t + s to place 4s + t), which puts at wgmma
//    slot q the k that the decode kernels' fragment puts at mma slot q. No tensor map can do that
//    (its smallest contiguous piece is 16 bytes), so a small kernel first writes the call's tokens
//    in that order, tiled as the ring wants them, into a scratch reserved beforehand
//    (linear_reserve_decode_scratch), with input_rms's sums of squares in sum_squares' order;
//  - class w runs the 32-k steps w, w + 8, ... of each rank's range up to
//    linear_masked_end(len) in order, steps past the range with zero operands; the range sum is
//    ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7)), the ranks' sums are added in rank order,
//    then input_rms's scale and the store policy (linear_decode_common.cuh) of the decode kernels.
// Calls whose k ranges do not start on 32-k groups (in or range_k not multiples of 32) and calls
// without the scratch go to the class-split kernel instead (the same bits).
//
// Layout: per 128-k ring stage (half of a 256-k chunk: classes 4h..4h+3) one tensor-map box of
// 64 weight rows x 128 k (256-byte rows) and one 16 KB bulk copy of the prepared tokens; warpgroups
// 0 and 1 (classes 0-3) consume the even stages, 2 and 3 the odd ones. 16 warps and no producer
// warp (a 17th warp caps ptxas at 96 registers, which spills): thread 0 fills the ring, then the
// first warp of warpgroups 0 and 2 refills a slot of its parity once all 8 warps of that parity
// have released it. A block takes a contiguous range of (row tile, token tile) items, token tiles
// inner, so a row tile's weights come from L2 after its first token tile; a tile's k ranks run one
// after the other in the block.
//
// A bench variant (linear_skinny_set_variant(15)), not production. Measured on the H200
// (kernel_bench linear_batch, TB/s of weights; docs/cuda.md known gap 6): at 256 rows 0.23-0.58
// against the class-split kernel's 0.48-0.70 (faster only on gate|up), at 1..64 rows 1.0-2.5
// against the batched kernel's 2.0-4.1. Every stage moves as many token bytes as weight bytes into
// shared memory (64 x 64 tiles: the 8 classes' accumulators fill the registers), so the fill (~4-5
// TB/s in all, estimated from these figures, not profiled) bounds it at ~130-150 TFLOP/s; out_f =
// 5120 has only 80 row tiles, and the ranks are serial.
#include <cuda.h>

#include <algorithm>

#include "kernels/linear/linear_decode_common.cuh"
#include "kernels/linear/linear_plan.h"
#include "kernels/tensor_map_cuda.cuh"

namespace tandem::kernels {

namespace {

using namespace decode_linear;  // NOLINT: the shared pieces of the decode kernels

constexpr int kTileM = 64;    // weight rows per tile: one wgmma m64
constexpr int kTileN = 64;    // tokens per tile: wgmma n64
constexpr int kStageK = 128;  // k per ring stage
constexpr int kGroupK = 32;   // a class's k-step
constexpr int kGroups = 4;    // warpgroups that compute, classes 2q and 2q + 1 in group q
constexpr int kStages = 4;    // ring stages (32 KB each)
constexpr int kWgThreads = kGroups * 128;  // no producer warp: 17 warps would cap registers
constexpr uint32_t kSumsBarrier = 1;       // every thread
constexpr int kChunks16 = kStageK / 8;     // 16-byte k pieces of a stage (4 per 32-k group)

struct WgStage {
  __nv_bfloat16 w[kTileM][kStageK];        // tensor-map box, 256-byte rows
  unsigned char x[kChunks16][kTileN][16];  // prepared tokens: piece, token, 16 bytes
};

struct WgSmem {
  WgStage ring[kStages];  // first: 128-byte aligned (tensor-map boxes)
  // Each warpgroup's pair sums c_2q + c_2q+1 at a range's end: float4 r of consumer thread l at
  // sums[q][r][l] (its accumulators 4r..4r+3).
  float4 sums[kGroups][8][128];
  unsigned char zero[2][kTileN][16];  // the B operand of zero steps (two k halves)
  uint64_t full[kStages], empty[kStages];
};

struct WgParams {
  Params p;                 // the plan's splits and range_k; tiles, clusters unused
  CUtensorMap w;            // box [kStageK, kTileM]
  const __nv_bfloat16* xs;  // prepared tokens: [token tile][group][piece 0..3][64 tokens][8]
  const float* sumsq;       // input_rms: each token's sum of squares (sum_squares' order)
  int64_t groups;           // 32-k groups per token row in xs, a multiple of 4
  int m_tiles, n_tiles, items, blocks;
};

// No-swizzle K-major operand of one k16 step, 8 x 16-byte core matrices: the two k halves 1024
// bytes apart (pieces), consecutive 8-token groups 128 bytes apart.
__device__ __forceinline__ uint64_t b_desc(const void* p) {
  return (static_cast<uint64_t>(cuda::smem_u32(p) & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(1024 >> 4) << 16) | (static_cast<uint64_t>(128 >> 4) << 32);
}

#define TANDEM_ACC32(c)                                                                           \
  "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]), "+f"(c[4]), "+f"(c[5]), "+f"(c[6]), "+f"(c[7]), \
      "+f"(c[8]), "+f"(c[9]), "+f"(c[10]), "+f"(c[11]), "+f"(c[12]), "+f"(c[13]), "+f"(c[14]),    \
      "+f"(c[15]), "+f"(c[16]), "+f"(c[17]), "+f"(c[18]), "+f"(c[19]), "+f"(c[20]), "+f"(c[21]),  \
      "+f"(c[22]), "+f"(c[23]), "+f"(c[24]), "+f"(c[25]), "+f"(c[26]), "+f"(c[27]), "+f"(c[28]),  \
      "+f"(c[29]), "+f"(c[30]), "+f"(c[31])

// c (64 rows x 64 tokens, the mma C layout per warp and 8-token group) += A B over one k16 step.
__device__ __forceinline__ void wgmma_k16(float (&c)[32], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : TANDEM_ACC32(c)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));
}
#undef TANDEM_ACC32

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit_wait() {
  asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

// Bytes of one element of the store policy's out.
template <class Store>
constexpr int64_t kOutBytes = 2;
template <>
constexpr int64_t kOutBytes<StoreY<float>> = 4;

// Word i of v (i < 4), without indexing a register array.
__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// One warp per token: its row in the ring's order (prepare's header) and, with rms, its sum of
// squares in sum_squares' order (lane l adds the 8-element groups l, l + 32, ... in order, then
// warp_sum). Lanes 4a..4a+3 hold the four 16-byte pieces of one 32-k group and transpose its
// pairs through shuffles: lane 4a + s ends with pair s of each piece t at word t.
__global__ void __launch_bounds__(256)
    prepare_tokens_kernel(const __nv_bfloat16* __restrict__ x, int64_t x_stride, int64_t in, int n,
                          int64_t groups, __nv_bfloat16* __restrict__ xs, float* __restrict__ sumsq,
                          bool rms) {
  cuda::pdl_begin();  // x is the previous kernel's output
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t tok = static_cast<int64_t>(blockIdx.x) * 8 + warp;
  if (tok >= n) return;
  const __nv_bfloat16* row = x + tok * x_stride;
  __nv_bfloat16* tile = xs + ((tok / kTileN) * groups * 4 * kTileN + tok % kTileN) * 8;
  const int q = lane & 3;
  float s = 0.f;
  for (int64_t base = 0; base < in; base += 256) {
    const int64_t k0 = base + lane * 8;
    const bool ok = k0 < in;  // in % 32 == 0: a quad's pieces are in or out together
    const uint4 v = ok ? __ldcg(reinterpret_cast<const uint4*>(row + k0)) : make_uint4(0, 0, 0, 0);
    if (rms) {
      const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&v);
#pragma unroll
      for (int k = 0; k < 8; ++k) s += __bfloat162float(e[k]) * __bfloat162float(e[k]);
    }
    uint4 got;  // round r: lane q reads piece (q + r) & 3's word q, which is word (q + r) & 3
    got.x = __shfl_sync(0xffffffffu, word_of(v, q), lane);
    got.y = __shfl_sync(0xffffffffu, word_of(v, (q - 1) & 3), (lane & ~3) | ((q + 1) & 3));
    got.z = __shfl_sync(0xffffffffu, word_of(v, (q - 2) & 3), (lane & ~3) | ((q + 2) & 3));
    got.w = __shfl_sync(0xffffffffu, word_of(v, (q - 3) & 3), (lane & ~3) | ((q + 3) & 3));
    if (ok) {  // word t of the piece: got's word (t - q) & 3
      const int64_t group = k0 / kGroupK;
      *reinterpret_cast<uint4*>(tile + (group * 4 + q) * kTileN * 8) =
          make_uint4(word_of(got, (0 - q) & 3), word_of(got, (1 - q) & 3),
                     word_of(got, (2 - q) & 3), word_of(got, (3 - q) & 3));
    }
  }
  if (rms) {
    s = cuda::warp_sum(s);
    if (lane == 0) sumsq[tok] = s;
  }
}

template <class Store>
__global__ void __launch_bounds__(kWgThreads, 1)
    linear_wgmma_kernel(const __grid_constant__ WgParams wp) {
  const Params& p = wp.p;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<WgSmem*>(smem_raw);
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int item_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * wp.items / wp.blocks);
  const int item_end =
      static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * wp.items / wp.blocks);

  // A rank's k range, its loaded stages and its 256-k chunks (production's 1024-k chunks).
  struct Range {
    int64_t k_begin, len;
    int loaded, chunks;
  };
  const auto range_of = [&](int r) {
    Range g;
    g.k_begin = r * p.range_k;
    const int64_t k_end = min(p.in, g.k_begin + p.range_k);
    g.len = max(k_end - g.k_begin, int64_t{0});
    g.loaded = static_cast<int>((g.len + kStageK - 1) / kStageK);
    g.chunks = static_cast<int>(linear_masked_end(g.len) / 256);
    return g;
  };
  // The block's stages in order (item, rank, 128-k stage); stage u copies these.
  int per_item = 0;
  for (int r = 0; r < p.splits; ++r) per_item += range_of(r).loaded;
  const uint32_t n_stages = static_cast<uint32_t>(per_item * (item_end - item_begin));
  constexpr uint32_t kStageBytes = sizeof(WgStage);
  const auto issue = [&](uint32_t u, bool weights, bool tokens) {
    const int item = item_begin + static_cast<int>(u / static_cast<uint32_t>(per_item));
    int rem = static_cast<int>(u % static_cast<uint32_t>(per_item)), r = 0;
    while (rem >= range_of(r).loaded) rem -= range_of(r++).loaded;
    const int64_t k = r * p.range_k + static_cast<int64_t>(rem) * kStageK;
    const uint32_t slot = u % kStages;
    if (weights) {
      cuda::mbar_arrive_expect_tx(&sm.full[slot], kStageBytes);
      cuda::tensor_load_2d(&sm.ring[slot].w[0][0], &wp.w, k,
                           static_cast<int64_t>(item / wp.n_tiles) * kTileM, &sm.full[slot]);
    }
    if (tokens) {
      const int64_t nt = item % wp.n_tiles;
      cuda::bulk_copy(&sm.ring[slot].x[0][0][0],
                      wp.xs + (nt * wp.groups + k / kGroupK) * 4 * kTileN * 8,
                      kChunks16 * kTileN * 16, &sm.full[slot]);
    }
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      cuda::mbar_init(&sm.full[s], 1);
      cuda::mbar_init(&sm.empty[s], 8);  // the 8 warps of the two warpgroups of its parity
    }
    cuda::fence_mbar_init();
  }
  for (int i = static_cast<int>(threadIdx.x); i < 2 * kTileN; i += kWgThreads) {
    *reinterpret_cast<uint4*>(&sm.zero[i / kTileN][i % kTileN][0]) = make_uint4(0, 0, 0, 0);
  }
  cuda::fence_proxy_async();  // the tensor cores read `zero`
  __syncthreads();
  // Thread 0 fills the ring: the first stages' weights before the previous kernel has finished
  // (weights are never written by a step), their tokens after it. From then on the first warp
  // of each parity's first warpgroup refills a slot once both warpgroups have released it.
  const uint32_t pre = min(n_stages, static_cast<uint32_t>(kStages));
  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wp.w)) : "memory");
    for (uint32_t u = 0; u < pre; ++u) issue(u, true, false);
  }
  cuda::pdl_begin();  // before reading the tokens, sumsq and out
  if (threadIdx.x == 0) {
    for (uint32_t u = 0; u < pre; ++u) issue(u, false, true);
  }

  // Warpgroup q = warp / 4 (classes 2q, 2q + 1; stages of parity h = q / 2), warp wi of it (tile
  // rows 16 wi .. 16 wi + 15), lane (g, t).
  const int q = warp >> 2, wi = warp & 3, h = q >> 1, g = lane >> 2, t = lane & 3;
  const int l = static_cast<int>(threadIdx.x) & 127;  // thread within the warpgroup
  const bool refills = (q & 1) == 0 && wi == 0 && lane == 0;
  const uint64_t zero_desc = b_desc(&sm.zero[0][0][0]);
  uint32_t it0 = 0;  // stages before the current range
  for (int item = item_begin; item < item_end; ++item) {
    const int m = item / wp.n_tiles, nt = item % wp.n_tiles;
    float total[8];
    for (int r = 0; r < p.splits; ++r) {
      const Range rg = range_of(r);
      float acc[2][32];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
#pragma unroll
        for (int e = 0; e < 32; ++e) acc[c][e] = 0.f;
      }
      for (int i = 0; i < rg.chunks; ++i) {
        const int j = 2 * i + h;  // the stage of this chunk's half
        const bool staged = j < rg.loaded;
        const uint32_t it = it0 + static_cast<uint32_t>(j), slot = it % kStages;
        if (staged) cuda::mbar_wait(&sm.full[slot], (it / kStages) & 1);
        wgmma_fence();
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int w_in = 2 * (q & 1) + c;  // the class's step within the stage
          const bool real =
              staged && static_cast<int64_t>(i) * 256 + h * kStageK + w_in * kGroupK < rg.len;
          uint4 pa = make_uint4(0, 0, 0, 0), pb = pa;  // production's zero operands if not real
          uint64_t b0 = zero_desc, b1 = zero_desc;
          if (real) {
            const WgStage& st = sm.ring[slot];
            const int kl = w_in * kGroupK + 8 * t;
            pa = *reinterpret_cast<const uint4*>(&st.w[16 * wi + g][kl]);
            pb = *reinterpret_cast<const uint4*>(&st.w[16 * wi + g + 8][kl]);
            b0 = b_desc(&st.x[4 * w_in][0][0]);
            b1 = b_desc(&st.x[4 * w_in + 2][0][0]);
          }
          wgmma_k16(acc[c], pa.x, pb.x, pa.y, pb.y, b0);
          wgmma_k16(acc[c], pa.z, pb.z, pa.w, pb.w, b1);
        }
        wgmma_commit_wait();
        if (staged) {
          cuda::release_slot(&sm.empty[slot], lane);
          if (refills && it + kStages < n_stages) {
            cuda::mbar_wait(&sm.empty[slot], (it / kStages) & 1);
            issue(it + kStages, true, true);
          }
        }
      }
      it0 += static_cast<uint32_t>(rg.loaded);
      // The range's sum: this warpgroup's pair, then the tree's upper levels over all four.
#pragma unroll
      for (int rr = 0; rr < 8; ++rr) {
        sm.sums[q][rr][l] = make_float4(
            acc[0][4 * rr] + acc[1][4 * rr], acc[0][4 * rr + 1] + acc[1][4 * rr + 1],
            acc[0][4 * rr + 2] + acc[1][4 * rr + 2], acc[0][4 * rr + 3] + acc[1][4 * rr + 3]);
      }
      cuda::named_barrier(kSumsBarrier, kWgThreads);
      // This thread finishes accumulators 8q .. 8q + 7 of thread l of every warpgroup: tokens
      // 16q + 8jj + 2t + (e & 1) of rows 16 wi + g (+ 8).
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float4 p0 = sm.sums[0][2 * q + half][l], p1 = sm.sums[1][2 * q + half][l];
        const float4 p2 = sm.sums[2][2 * q + half][l], p3 = sm.sums[3][2 * q + half][l];
        const float s0 = (p0.x + p1.x) + (p2.x + p3.x), s1 = (p0.y + p1.y) + (p2.y + p3.y);
        const float s2 = (p0.z + p1.z) + (p2.z + p3.z), s3 = (p0.w + p1.w) + (p2.w + p3.w);
        float* tt = &total[4 * half];
        if (r == 0) {
          tt[0] = s0, tt[1] = s1, tt[2] = s2, tt[3] = s3;
        } else {
          tt[0] += s0, tt[1] += s1, tt[2] += s2, tt[3] += s3;
        }
      }
      cuda::named_barrier(kSumsBarrier, kWgThreads);  // sums may be rewritten
    }
    // The store: 16 tokens (two 8-token groups) of the tile's 16-row tile wi.
    const int64_t tok0 = static_cast<int64_t>(nt) * kTileN + 16 * q;
    if (tok0 >= p.n_tokens) continue;
    Params ps = p;
    ps.n_tokens = static_cast<int>(p.n_tokens - tok0);
    ps.out = static_cast<char*>(p.out) + tok0 * p.out_stride * kOutBytes<Store>;
    const int64_t tile16 = static_cast<int64_t>(m) * (kTileM / kRows) + wi;
    if (tile16 * kRows >= p.out_f) continue;  // past the matrix (the swiglu store has no check)
    float c[2][4], prev[2][4] = {};
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
#pragma unroll
      for (int e = 0; e < 4; ++e) c[jj][e] = total[4 * jj + e];
    }
    if constexpr (Store::kReadsOut) Store::template load_prev<2>(ps, tile16, g, t, prev);
    if (p.input_rms) {
      float scale[2][2];
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int tok = min(jj * 8 + 2 * t + e, ps.n_tokens - 1);
          scale[jj][e] = inverse_rms_of(p, wp.sumsq[tok0 + tok]);
        }
      }
      scale_sums<2>(c, scale);
    }
    Store::template store<2>(ps, tile16, g, t, c, prev);
  }
}

// ---- host side ----

// The prepared tokens and their sums of squares (linear_reserve_decode_scratch); never destroyed,
// since a static's destructor would run after the CUDA runtime has shut down.
Tensor& g_scratch = *new Tensor();
int64_t g_scratch_in = 0;  // the largest `in` it holds kClassesMaxTokens rows of

int64_t groups_of(int64_t in) { return (in + kStageK - 1) / kStageK * (kStageK / kGroupK); }

// bf16 elements of the prepared tokens of n rows of in k; then n floats.
int64_t token_elems(int64_t n, int64_t in) {
  return (n + kTileN - 1) / kTileN * kTileN * groups_of(in) * kGroupK;
}

template <class Store>
bool launch_wgmma(const LinearShape& s, cudaStream_t stream) {
  static_assert(sizeof(WgSmem) <= 227 * 1024, "shared memory of one block on sm_90");
  if (s.in % kGroupK != 0 || s.in > g_scratch_in) return false;
  const int64_t tiles = (s.out_f + kRows - 1) / kRows;
  const LinearPlan plan =
      plan_linear(tiles, s.in, kLinearPlanChunkK, linear_plan_resident(), cuda::sm_count());
  if (plan.range_k % kGroupK != 0) return false;
  static const bool configured = [] {
    TANDEM_CUDA_CHECK(cudaFuncSetAttribute(linear_wgmma_kernel<Store>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(sizeof(WgSmem))));
    return true;
  }();
  (void)configured;
  WgParams wp{};
  wp.p = decode_params(s, plan, 1);
  wp.groups = groups_of(s.in);
  auto* xs = g_scratch.data<__nv_bfloat16>();
  auto* sumsq = reinterpret_cast<float*>(xs + token_elems(kClassesMaxTokens, g_scratch_in));
  wp.xs = xs;
  wp.sumsq = sumsq;
  wp.m_tiles = static_cast<int>((s.out_f + kTileM - 1) / kTileM);
  wp.n_tiles = static_cast<int>((s.n + kTileN - 1) / kTileN);
  wp.items = wp.m_tiles * wp.n_tiles;
  wp.blocks = std::min(wp.items, cuda::sm_count());
  if (!linear_encode_rows(&wp.w, s.w, s.out_f, s.in, s.in, kStageK, kTileM)) return false;
  cuda::launch_pdl(prepare_tokens_kernel, dim3(static_cast<unsigned>((s.n + 7) / 8)), dim3(256), 0,
                   stream, static_cast<const __nv_bfloat16*>(s.x), s.x_stride, s.in,
                   static_cast<int>(s.n), wp.groups, xs, sumsq, s.input_rms);
  cuda::launch_pdl(linear_wgmma_kernel<Store>, dim3(static_cast<unsigned>(wp.blocks)),
                   dim3(kWgThreads), sizeof(WgSmem), stream, wp);
  return true;
}

}  // namespace

bool linear_decode_wgmma(const LinearShape& s, bool f32_out, cudaStream_t stream) {
  if (!s.vec_ok || s.n < 1 || s.n > kClassesMaxTokens || g_scratch_in == 0) return false;
  if (s.epilogue == LinearEpilogue::kSwiGluPairs) {
    if (s.out_f % kRows != 0) return false;
    return launch_wgmma<StoreSwiGluPairs>(s, stream);
  }
  if (s.epilogue == LinearEpilogue::kAddToOut) return launch_wgmma<StoreAddY>(s, stream);
  return f32_out ? launch_wgmma<StoreY<float>>(s, stream)
                 : launch_wgmma<StoreY<__nv_bfloat16>>(s, stream);
}

void linear_reserve_decode_scratch(int64_t max_in, Device device) {
  if (device != Device::kCuda || max_in <= g_scratch_in) return;
  const int64_t elems = token_elems(kClassesMaxTokens, max_in) + 2 * kClassesMaxTokens;
  g_scratch = Tensor();  // free the old one first
  g_scratch = Tensor::zeros({elems}, DType::kBF16, Device::kCuda);
  g_scratch_in = max_in;
}

}  // namespace tandem::kernels
