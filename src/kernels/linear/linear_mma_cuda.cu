// Decode/verify linear (n_tokens <= 16) on tensor cores: mma.sync m16n8k16 bf16 -> fp32 with the
// weights as the 16-row A operand and up to 16 tokens as one or two 8-column B tiles, so that the
// FMA rate never limits the weight stream as n_tokens grows. A block of 4 warps owns 16 weight
// rows; warp w takes k-steps w, w+4, ... (a split of 4 fixed for every shape) and the 4 partials
// are added in the fixed order (w0 + w1) + (w2 + w3). Each token is its own B column, computed by
// the same instruction sequence whatever n_tokens is (row invariance, tested bitwise).
// Within a 32-wide k-step lane (g, t) loads 8 consecutive k of rows g, g+8 and of token g with one
// 16-byte load each; the mma's k index is a permutation of the true k, identical for A and B.
#include "kernels/cuda_common.cuh"
#include "kernels/linear/linear_cuda.cuh"

namespace tandem::kernels {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerBlock = 16;
constexpr int kStepK = 32;

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint4 ldg16(const __nv_bfloat16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

template <int kNTiles, typename TOut>
__global__ void __launch_bounds__(kWarps * 32)
    linear_mma_kernel(const __nv_bfloat16* __restrict__ x, int64_t x_stride,
                      const __nv_bfloat16* __restrict__ w, int64_t in, int64_t out_f,
                      TOut* __restrict__ out, int64_t out_stride, int n_tokens) {
  __shared__ float part[kWarps][kNTiles][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int64_t ra = min(row0 + g, out_f - 1), rb = min(row0 + g + 8, out_f - 1);  // clamped
  const __nv_bfloat16* wa = w + ra * in;
  const __nv_bfloat16* wb = w + rb * in;
  float c[kNTiles][4];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) c[j][i] = 0.f;
  }
  const int64_t n_steps = (in + kStepK - 1) / kStepK;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // Weight chunks of this warp's next two k-steps stay in flight while the current one is used.
  auto fetch = [&](uint4& da, uint4& db, int64_t step) {
    const int64_t k = step * kStepK + 8 * t;
    const bool ok = step < n_steps && k < in;
    da = ok ? ldg16(wa + k) : zero;
    db = ok ? ldg16(wb + k) : zero;
  };
  uint4 a_cur, b_cur, a_nxt, b_nxt;
  fetch(a_cur, b_cur, warp);
  fetch(a_nxt, b_nxt, warp + kWarps);
  for (int64_t step = warp; step < n_steps; step += kWarps) {
    const uint4 pa = a_cur, pb = b_cur;
    a_cur = a_nxt;
    b_cur = b_nxt;
    fetch(a_nxt, b_nxt, step + 2 * kWarps);
    const int64_t k = step * kStepK + 8 * t;
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      const int tok = j * 8 + g;
      const uint4 xv = (tok < n_tokens && k < in) ? ldg16(x + tok * x_stride + k) : zero;
      mma_bf16(c[j], pa.x, pb.x, pa.y, pb.y, xv.x, xv.y);
      mma_bf16(c[j], pa.z, pb.z, pa.w, pb.w, xv.z, xv.w);
    }
  }
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) part[warp][j][i][lane] = c[j][i];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float v =
          (part[0][j][i][lane] + part[1][j][i][lane]) + (part[2][j][i][lane] + part[3][j][i][lane]);
      const int64_t row = row0 + g + (i >= 2 ? 8 : 0);  // c0,c1: row g; c2,c3: row g + 8
      const int tok = j * 8 + 2 * t + (i & 1);          // c0,c2: column 2t; c1,c3: 2t + 1
      if (row < out_f && tok < n_tokens) out[tok * out_stride + row] = cuda::from_float<TOut>(v);
    }
  }
}

template <typename TOut>
void launch(const LinearShape& s, cudaStream_t stream) {
  const unsigned grid = cuda::ceil_div(s.out_f, kRowsPerBlock);
  const auto* x = static_cast<const __nv_bfloat16*>(s.x);
  const auto* w = static_cast<const __nv_bfloat16*>(s.w);
  auto* out = static_cast<TOut*>(s.out);
  const int n = static_cast<int>(s.n);
  if (s.n <= 8) {
    linear_mma_kernel<1, TOut>
        <<<grid, kWarps * 32, 0, stream>>>(x, s.x_stride, w, s.in, s.out_f, out, s.out_stride, n);
  } else {
    linear_mma_kernel<2, TOut>
        <<<grid, kWarps * 32, 0, stream>>>(x, s.x_stride, w, s.in, s.out_f, out, s.out_stride, n);
  }
  cuda::check_launch("linear_mma_kernel");
}

}  // namespace

void linear_skinny_mma_bf16(const LinearShape& s, cudaStream_t stream) {
  launch<__nv_bfloat16>(s, stream);
}
void linear_skinny_mma_f32(const LinearShape& s, cudaStream_t stream) { launch<float>(s, stream); }

}  // namespace tandem::kernels
