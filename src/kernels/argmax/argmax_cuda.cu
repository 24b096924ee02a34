// CUDA argmax over f32 logits: a cluster of kBlocks blocks per row, block b scanning the b-th
// slice, so that a 248K vocabulary is ~30 loads per thread over 8 SMs with 8 in flight per
// thread (one block per row took ~240 serial loads per thread). Each thread keeps its first
// maximum, pairs (value, index) are combined so that the larger value wins and ties go to the
// lower index, and the blocks' results meet in block 0 through distributed shared memory. The
// result is exact and order-independent; NaN never wins and an all -inf/NaN row gives 0 (as ref).
#include <cooperative_groups.h>

#include <climits>

#include "kernels/argmax/argmax.h"
#include "kernels/cuda_common.cuh"

namespace tandem::kernels {

namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kBlocks = 8;  // per row: one portable cluster

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void warp_best(float& bv, int& bi) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
    if (better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* logits, int64_t stride, int64_t vocab, int32_t* out) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  __shared__ float cluster_v[kBlocks];  // block 0: each block's best
  __shared__ int cluster_i[kBlocks];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const int64_t row = blockIdx.x / kBlocks;
  const int64_t slice = (vocab + kBlocks - 1) / kBlocks;
  const int64_t begin = rank * slice, end = min(vocab, begin + slice);
  const float* l = logits + row * stride;
  float bv = -INFINITY;
  int bi = INT_MAX;
#pragma unroll 8
  for (int64_t v = begin + threadIdx.x; v < end; v += kThreads) {
    const float x = l[v];
    if (x > bv) {  // strided scan: the first (lowest) index of a value is kept
      bv = x;
      bi = static_cast<int>(v);
    }
  }
  warp_best(bv, bi);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = sv[lane];
    bi = si[lane];
    warp_best(bv, bi);
    if (lane == 0) {
      *cluster.map_shared_rank(&cluster_v[rank], 0) = bv;
      *cluster.map_shared_rank(&cluster_i[rank], 0) = bi;
    }
  }
  cluster.sync();  // every block's best is in block 0; no remote access after this
  if (rank == 0 && threadIdx.x == 0) {
    bv = cluster_v[0];
    bi = cluster_i[0];
    for (int b = 1; b < kBlocks; ++b) {
      if (better(cluster_v[b], cluster_i[b], bv, bi)) {
        bv = cluster_v[b];
        bi = cluster_i[b];
      }
    }
    out[row] = bi == INT_MAX ? 0 : bi;
  }
}

}  // namespace

void argmax_cuda(const ArgmaxArgs& a, const ExecContext& ctx) {
  cuda::expect_cuda_dtype(a.logits, DType::kF32, "argmax", "logits");
  cuda::expect_cuda_dtype(a.out, DType::kI32, "argmax", "out");
  cuda::expect_last_contiguous(a.logits, "argmax", "logits");
  const int64_t n = a.logits.dim(0), vocab = a.logits.dim(1);
  TANDEM_CHECK(a.out.numel() >= n && vocab < INT_MAX, "argmax_cuda: out {} for logits {}",
               a.out.describe(), a.logits.describe());
  if (n == 0) return;
  cuda::launch_pdl_cluster(argmax_kernel, static_cast<unsigned>(n * kBlocks), kThreads, kBlocks, 0,
                           cuda::stream_of(ctx), a.logits.data<const float>(), a.logits.stride(0),
                           vocab, a.out.data<int32_t>());
  cuda::check_launch("argmax_kernel");
}

}  // namespace tandem::kernels
