// Prefill GEMM for linear (n_tokens > 16): bf16 tensor cores (WMMA 16x16x16, fp32 accumulate),
// 128x128x32 block tiles, 8 warps of 64x32, a two-stage cp.async pipeline. No split-K: every output
// element sums its K tiles in the same order whatever n_tokens is, so prefill rows are invariant
// among themselves. Not yet wgmma/TMA: docs/cuda.md records the measured rate.
#include <mma.h>

#include "kernels/cuda_common.cuh"
#include "kernels/linear/linear_cuda.cuh"

namespace tandem::kernels {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBm = 128, kBn = 128, kBk = 32;
constexpr int kLd = kBk + 8;  // padded smem row (elements): 80 bytes, keeps 16-byte alignment
constexpr int kThreads = 256;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: zero-fill, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

struct Smem {
  __nv_bfloat16 a[2][kBm][kLd];
  __nv_bfloat16 b[2][kBn][kLd];
};

// Loads one k tile of x (rows m0..) and W (rows n0..) into stage `st`; out-of-range chunks are 0.
__device__ __forceinline__ void load_tile(Smem& sm, int st, const __nv_bfloat16* x,
                                          int64_t x_stride, const __nv_bfloat16* w, int64_t in,
                                          int64_t m0, int64_t n0, int64_t k0, int64_t n_rows,
                                          int64_t out_f) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = threadIdx.x + i * kThreads;  // 512 chunks of 8 elements per operand
    const int r = c >> 2, kc = (c & 3) * 8;
    const int64_t k = k0 + kc;
    const bool kin = k < in;  // in % 8 == 0, so a chunk is either fully in or fully out
    const int64_t m = m0 + r, n = n0 + r;
    const bool va = kin && m < n_rows, vb = kin && n < out_f;
    cp_async16(&sm.a[st][r][kc], va ? x + m * x_stride + k : x, va);
    cp_async16(&sm.b[st][r][kc], vb ? w + n * in + k : w, vb);
  }
}

template <typename TOut>
__global__ void __launch_bounds__(kThreads)
    linear_gemm_kernel(const __nv_bfloat16* __restrict__ x, int64_t x_stride,
                       const __nv_bfloat16* __restrict__ w, int64_t in, int64_t out_f,
                       TOut* __restrict__ out, int64_t out_stride, int64_t n_rows) {
  __shared__ __align__(128) Smem sm;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp >> 2, wn = warp & 3;  // 2 x 4 warps, each 64 x 32
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBm;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBn;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  }
  const int64_t n_k = (in + kBk - 1) / kBk;
  load_tile(sm, 0, x, x_stride, w, in, m0, n0, 0, n_rows, out_f);
  cp_async_commit();
  for (int64_t kt = 0; kt < n_k; ++kt) {
    const int st = static_cast<int>(kt & 1);
    if (kt + 1 < n_k) {
      load_tile(sm, st ^ 1, x, x_stride, w, in, m0, n0, (kt + 1) * kBk, n_rows, out_f);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBk; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> af[4];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bf[2];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        wmma::load_matrix_sync(af[i], &sm.a[st][wm * 64 + i * 16][kk], kLd);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::load_matrix_sync(bf[j], &sm.b[st][wn * 32 + j * 16][kk], kLd);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
  // Epilogue: each warp stages one 16x16 fragment at a time in its own slice of the (now idle)
  // operand buffers and writes it out with bounds checks.
  float* stage = reinterpret_cast<float*>(&sm.a[0][0][0]) + warp * 256;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int64_t m = m0 + wm * 64 + i * 16 + e / 16, n = n0 + wn * 32 + j * 16 + e % 16;
        if (m < n_rows && n < out_f) out[m * out_stride + n] = cuda::from_float<TOut>(stage[e]);
      }
      __syncwarp();
    }
  }
}

template <typename TOut>
void launch_gemm(const LinearShape& s, cudaStream_t stream) {
  const dim3 grid(cuda::ceil_div(s.out_f, kBn), cuda::ceil_div(s.n, kBm));
  linear_gemm_kernel<TOut><<<grid, kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(s.x), s.x_stride, static_cast<const __nv_bfloat16*>(s.w),
      s.in, s.out_f, static_cast<TOut*>(s.out), s.out_stride, s.n);
  cuda::check_launch("linear_gemm_kernel");
}

}  // namespace

void linear_gemm_bf16(const LinearShape& s, cudaStream_t stream) {
  launch_gemm<__nv_bfloat16>(s, stream);
}
void linear_gemm_f32(const LinearShape& s, cudaStream_t stream) { launch_gemm<float>(s, stream); }

}  // namespace tandem::kernels
