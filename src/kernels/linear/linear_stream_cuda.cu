// Decode/verify linear (n_tokens <= 16) with the weights streamed by the bulk-copy engine:
// cp.async.bulk moves each 16-row x 256-k weight chunk into shared memory (one 512-byte run per
// row, so DRAM sees long contiguous reads), kStages chunks in flight per block behind mbarriers;
// the 4 warps then feed mma.sync m16n8k16 (bf16 -> fp32) from shared memory with the weights as
// the 16-row A operand and up to 16 tokens as one or two 8-column B tiles, read from global
// memory (they stay in L1/L2).
//
// Work split, fixed by the weight shape and the GPU's SM count, never by n_tokens (row
// invariance): in each chunk warp w takes k-steps 2w and 2w + 1 (of 32), accumulating across
// chunks; the 4 warp partials are added as (w0 + w1) + (w2 + w3). Shapes with few 16-row tiles
// split the chunks into 2..8 contiguous ranges, one block each, forming a thread-block cluster
// whose rank 0 adds the range sums from the other blocks' shared memory in increasing order.
// Within a k-step, lane (g, t) reads 8 consecutive k of rows g and g + 8 and of token g; the
// mma's k index is a permutation of the true k, identical for A and B.
#include <cooperative_groups.h>

#include "kernels/bulk_copy.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/linear/linear_cuda.cuh"

namespace tandem::kernels {

namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 4;
constexpr int kRows = 16;
constexpr int kChunkK = 256;    // k per chunk: 8 k-steps of 32, 2 per warp
constexpr int kRowPitch = 288;  // smem row in elements: 576 B = 64 mod 128, no bank conflicts
constexpr int kStages = 4;      // chunks in flight per block (32 KB)
constexpr int kMaxSplits = 8;   // portable cluster size

template <int kNTiles>
struct Sums {
  float v[kNTiles][4][32];
};

template <int kNTiles>
struct Smem {
  __nv_bfloat16 w[kStages][kRows][kRowPitch];
  uint64_t full[kStages];
  float part[kWarps][kNTiles][4][32];
  Sums<kNTiles> sums;
};

template <int kNTiles, typename TOut>
__global__ void __launch_bounds__(kWarps * 32)
    linear_stream_kernel(const __nv_bfloat16* __restrict__ x, int64_t x_stride,
                         const __nv_bfloat16* __restrict__ w, int64_t in, int64_t out_f,
                         TOut* __restrict__ out, int64_t out_stride, int n_tokens,
                         int64_t chunks_per_split) {
  __shared__ __align__(128) Smem<kNTiles> sm;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int splits = static_cast<int>(gridDim.y), split = static_cast<int>(blockIdx.y);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t n_chunks = (in + kChunkK - 1) / kChunkK;
  const int64_t c_begin = split * chunks_per_split;
  const int64_t c_end = min(n_chunks, c_begin + chunks_per_split);
  const int64_t count = c_end > c_begin ? c_end - c_begin : int64_t{0};

  // Thread 0 fills a stage: one bulk copy per weight row (rows past out_f repeat the last row).
  auto issue = [&](int64_t i) {
    const int slot = static_cast<int>(i % kStages);
    const int64_t k0 = (c_begin + i) * kChunkK;
    const uint32_t bytes = static_cast<uint32_t>(min(static_cast<int64_t>(kChunkK), in - k0) * 2);
    cuda::mbar_arrive_expect_tx(&sm.full[slot], bytes * kRows);
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = min(row0 + r, out_f - 1);
      cuda::bulk_copy(&sm.w[slot][r][0], w + row * in + k0, bytes, &sm.full[slot]);
    }
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) cuda::mbar_init(&sm.full[s], 1);
    cuda::fence_mbar_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int64_t i = 0; i < min(static_cast<int64_t>(kStages), count); ++i) issue(i);
  }

  float c[kNTiles][4];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) c[j][q] = 0.f;
  }
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // Token chunks for this warp's two k-steps of chunk i, loaded one chunk ahead so that their L2
  // latency hides behind the wait for the weights.
  auto load_x = [&](uint4(&xv)[2][kNTiles], int64_t i) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int64_t k = (c_begin + i) * kChunkK + (2 * warp + s) * 32 + 8 * t;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const int tok = j * 8 + g;
        xv[s][j] = (i < count && tok < n_tokens && k < in)
                       ? __ldg(reinterpret_cast<const uint4*>(x + tok * x_stride + k))
                       : zero;
      }
    }
  };
  uint4 x_cur[2][kNTiles], x_next[2][kNTiles];
  load_x(x_cur, 0);
  for (int64_t i = 0; i < count; ++i) {
    const int slot = static_cast<int>(i % kStages);
    load_x(x_next, i + 1);
    cuda::mbar_wait(&sm.full[slot], static_cast<uint32_t>((i / kStages) & 1));
    const int64_t k0 = (c_begin + i) * kChunkK;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int kl = (2 * warp + s) * 32 + 8 * t;  // k within the chunk
      const bool ok = k0 + kl < in;  // past `in` the stage holds stale data: never use it
      const uint4 pa = ok ? *reinterpret_cast<const uint4*>(&sm.w[slot][g][kl]) : zero;
      const uint4 pb = ok ? *reinterpret_cast<const uint4*>(&sm.w[slot][g + 8][kl]) : zero;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const uint4 xv = x_cur[s][j];
        mma_bf16(c[j], pa.x, pb.x, pa.y, pb.y, xv.x, xv.y);
        mma_bf16(c[j], pa.z, pb.z, pa.w, pb.w, xv.z, xv.w);
      }
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) x_cur[s][j] = x_next[s][j];
    }
    __syncthreads();  // every warp is done with this slot
    if (threadIdx.x == 0 && i + kStages < count) issue(i + kStages);
  }

#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) sm.part[warp][j][q][lane] = c[j][q];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        sm.sums.v[j][q][lane] = (sm.part[0][j][q][lane] + sm.part[1][j][q][lane]) +
                                (sm.part[2][j][q][lane] + sm.part[3][j][q][lane]);
      }
    }
  }
  const Sums<kNTiles>* ranks[kMaxSplits];
  if (splits > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every range sum of this tile is in its block's shared memory
    if (split == 0 && warp == 0) {
      for (int r = 0; r < splits; ++r) ranks[r] = cluster.map_shared_rank(&sm.sums, r);
    }
  } else if (warp == 0) {
    ranks[0] = &sm.sums;
  }
  if (split == 0 && warp == 0) {
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float v = ranks[0]->v[j][q][lane];
        for (int r = 1; r < splits; ++r) v += ranks[r]->v[j][q][lane];
        const int64_t row = row0 + g + (q >= 2 ? 8 : 0);  // c0,c1: row g; c2,c3: row g + 8
        const int tok = j * 8 + 2 * t + (q & 1);          // c0,c2: column 2t; c1,c3: 2t + 1
        if (row < out_f && tok < n_tokens) out[tok * out_stride + row] = cuda::from_float<TOut>(v);
      }
    }
  }
  if (splits > 1) cg::this_cluster().sync();  // keep shared memory alive until rank 0 has read it
}

template <int kNTiles, typename TOut>
void launch(const LinearShape& s, int max_splits, cudaStream_t stream) {
  const int64_t tiles = (s.out_f + kRows - 1) / kRows;
  const int64_t n_chunks = (s.in + kChunkK - 1) / kChunkK;
  // From the weight shape alone: ~4 blocks per SM, at least 4 chunks per range.
  int splits = 1;
  while (splits < min(max_splits, kMaxSplits) && tiles * splits < 4 * cuda::sm_count() &&
         n_chunks / (2 * splits) >= 4) {
    splits *= 2;
  }
  const int64_t per_split = (n_chunks + splits - 1) / splits;
  const auto kernel = linear_stream_kernel<kNTiles, TOut>;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits), 1);
  const auto* x = static_cast<const __nv_bfloat16*>(s.x);
  const auto* w = static_cast<const __nv_bfloat16*>(s.w);
  auto* out = static_cast<TOut*>(s.out);
  const int n = static_cast<int>(s.n);
  if (splits == 1) {
    kernel<<<grid, kWarps * 32, 0, stream>>>(x, s.x_stride, w, s.in, s.out_f, out, s.out_stride, n,
                                             per_split);
    cuda::check_launch("linear_stream_kernel");
    return;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kWarps * 32, 1, 1);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = static_cast<unsigned>(splits);
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  TANDEM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, x, s.x_stride, w, s.in, s.out_f, out,
                                       s.out_stride, n, per_split));
}

}  // namespace

void linear_skinny_stream(const LinearShape& s, bool f32_out, int max_splits, cudaStream_t stream) {
  if (s.n <= 8) {
    return f32_out ? launch<1, float>(s, max_splits, stream)
                   : launch<1, __nv_bfloat16>(s, max_splits, stream);
  }
  f32_out ? launch<2, float>(s, max_splits, stream)
          : launch<2, __nv_bfloat16>(s, max_splits, stream);
}

}  // namespace tandem::kernels
