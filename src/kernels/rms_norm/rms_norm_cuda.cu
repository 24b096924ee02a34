// CUDA RMSNorm (optionally fused with the residual add): one block per (row, head). The sum of
// squares is a per-thread sum in a fixed order followed by block_sum's fixed tree, and the block
// size is a function of dim alone, so a row's result does not depend on how many rows share the
// launch. With a residual, the bf16-rounded sum is what is stored and what is normalised, so the
// next layer reads exactly the value that was normed.
// Decode runs these on single rows, so latency is what counts: the vector kernel
// (rms_norm_cuda.cuh's row) issues all of a thread's 16-byte loads before using any (one memory
// latency per row instead of one per strided element), and its weights before the wait for the
// previous kernel; rows that are not 16-byte loadable take the scalar kernel. The vector kernel
// also applies RoPE after the norm (q_norm/k_norm + rope in one launch); otherwise RoPE is a
// second launch with the same rotation (rope_cuda.cuh), so the bits never depend on the path.
#include "kernels/cuda_common.cuh"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rms_norm/rms_norm_cuda.cuh"
#include "kernels/rope/rope.h"

namespace tandem::kernels {

namespace {

using cuda::RowView;

RowView row_view(const Tensor& t) {
  return RowView{t.data<__nv_bfloat16>(), t.stride(0), t.ndim() == 3 ? t.stride(1) : 0};
}

__global__ void rms_norm_kernel(RowView x, RowView out, RowView res, bool fused,
                                cuda::AnyFloatPtr w, int64_t n_heads, int64_t dim, float eps,
                                bool zero_centred) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
  const __nv_bfloat16* xs = x.at(r, h);
  __nv_bfloat16* src = fused ? res.at(r, h) : const_cast<__nv_bfloat16*>(xs);
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = __bfloat162float(src[i]);
    if (fused) {
      const __nv_bfloat16 sum = __float2bfloat16_rn(v + __bfloat162float(xs[i]));
      src[i] = sum;  // the same thread reads it back below
      v = __bfloat162float(sum);
    }
    ss += v * v;
  }
  ss = cuda::block_sum(ss, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(dim) + eps);
  __nv_bfloat16* o = out.at(r, h);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float wi = zero_centred ? 1.f + w[i] : w[i];
    o[i] = __float2bfloat16_rn((__bfloat162float(src[i]) * inv) * wi);
  }
}

__global__ void rms_norm_vec_kernel(RowView x, RowView out, RowView res, bool fused,
                                    cuda::AnyFloatPtr w, int64_t n_heads, int64_t dim, float eps,
                                    bool zero_centred, cuda::RopeParams rope) {
  // The weights load before the wait for the predecessor (a step never writes weights), so the
  // only memory latencies after it are the row's load and the store.
  const cuda::VecNormWeights wv = cuda::vec_norm_weights(w, dim, zero_centred);
  cuda::pdl_begin();
  const int64_t r = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
  const __nv_bfloat16* xs = x.at(r, h);
  __nv_bfloat16* src = fused ? res.at(r, h) : const_cast<__nv_bfloat16*>(xs);
  const float pos = rope.half > 0 ? static_cast<float>(rope.positions[r]) : 0.f;
  cuda::vec_norm_row(xs, src, out.at(r, h), fused, wv, dim, eps, rope, pos);
}

}  // namespace

void rms_norm_cuda(const RmsNormArgs& a, const ExecContext& ctx) {
  cuda::expect_cuda_dtype(a.x, DType::kBF16, "rms_norm", "x");
  cuda::expect_cuda_dtype(a.out, DType::kBF16, "rms_norm", "out");
  cuda::expect_last_contiguous(a.x, "rms_norm", "x");
  cuda::expect_last_contiguous(a.out, "rms_norm", "out");
  TANDEM_CHECK(a.x.shape() == a.out.shape() && (a.x.ndim() == 2 || a.x.ndim() == 3),
               "rms_norm_cuda: x {} and out {} must agree and be 2-D or 3-D", a.x.describe(),
               a.out.describe());
  const bool fused = a.residual.raw() != nullptr;
  if (fused) {
    cuda::expect_cuda_dtype(a.residual, DType::kBF16, "rms_norm", "residual");
    cuda::expect_last_contiguous(a.residual, "rms_norm", "residual");
    TANDEM_CHECK(a.residual.shape() == a.x.shape(), "rms_norm_cuda: residual {} vs x {}",
                 a.residual.describe(), a.x.describe());
  }
  const int64_t rows = a.x.dim(0), heads = a.x.ndim() == 3 ? a.x.dim(1) : 1, dim = a.x.dim(-1);
  const cuda::AnyFloatPtr w = cuda::any_float(a.weight, "rms_norm", "weight");
  TANDEM_CHECK(a.weight.numel() == dim, "rms_norm_cuda: weight {} does not match dim {}",
               a.weight.describe(), dim);
  const bool rope = a.rope_dim > 0;
  if (rope) {
    cuda::expect_cuda_dtype(a.rope_positions, DType::kI32, "rms_norm", "rope_positions");
    TANDEM_CHECK(a.x.ndim() == 3 && a.rope_dim % 2 == 0 && a.rope_dim <= dim &&
                     a.rope_positions.numel() >= rows,
                 "rms_norm_cuda: RoPE of {} dims on x {} with positions {} (3-D x, even "
                 "rope_dim <= head_dim, a position per row)",
                 a.rope_dim, a.x.describe(), a.rope_positions.describe());
  }
  if (rows * heads == 0) return;
  const bool vec = dim % 8 == 0 && dim <= 8 * cuda::kVecChunks * 1024 &&
                   cuda::rows_16b_loadable(a.x) && cuda::rows_16b_loadable(a.out) &&
                   (!fused || cuda::rows_16b_loadable(a.residual));
  if (vec) {
    const int threads = cuda::vec_norm_threads(dim);
    const bool fuse_rope = rope && a.rope_dim % 8 == 0 && a.rope_dim <= cuda::kRopeMaxDim;
    const cuda::RopeParams rp{fuse_rope ? a.rope_positions.data<const int32_t>() : nullptr,
                              fuse_rope ? a.rope_dim / 2 : 0, a.rope_theta};
    cuda::launch_pdl(rms_norm_vec_kernel, static_cast<unsigned>(rows * heads), threads, 0,
                     cuda::stream_of(ctx), row_view(a.x), row_view(a.out),
                     fused ? row_view(a.residual) : row_view(a.x), fused, w, heads, dim, a.eps,
                     a.zero_centred, rp);
    cuda::check_launch("rms_norm_vec_kernel");
    if (rope && !fuse_rope) rope_cuda({a.out, a.rope_positions, a.rope_dim, a.rope_theta}, ctx);
    return;
  }
  const int threads = dim >= 1024 ? 256 : 128;  // a function of dim only (row invariance)
  cuda::launch_pdl(rms_norm_kernel, static_cast<unsigned>(rows * heads), threads, 0,
                   cuda::stream_of(ctx), row_view(a.x), row_view(a.out),
                   fused ? row_view(a.residual) : row_view(a.x), fused, w, heads, dim, a.eps,
                   a.zero_centred);
  cuda::check_launch("rms_norm_kernel");
  if (rope) rope_cuda({a.out, a.rope_positions, a.rope_dim, a.rope_theta}, ctx);
}

}  // namespace tandem::kernels
