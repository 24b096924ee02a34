// CUDA partial NeoX RoPE, in place on a strided bf16 [n_tokens, n_heads, head_dim] view; one block
// per (token, head), one thread per rotated pair. Positions are read on the device (graph-safe).
// Frequencies follow the reference: inv_freq = 1 / theta^(2i/r) in fp32, precise sinf/cosf;
// the rotation is rope_cuda.cuh's, shared with the RMSNorm kernel that fuses RoPE.
#include "kernels/cuda_common.cuh"
#include "kernels/rope/rope.h"
#include "kernels/rope/rope_cuda.cuh"

namespace tandem::kernels {

namespace {

__global__ void rope_kernel(__nv_bfloat16* x, int64_t s0, int64_t s1, int64_t heads,
                            const int32_t* positions, int half, float theta) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  const int64_t t = blockIdx.x / heads, h = blockIdx.x % heads;
  __nv_bfloat16* p = x + t * s0 + h * s1;
  const float pos = static_cast<float>(positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float y1, y2;
    cuda::rope_rotate(__bfloat162float(p[i]), __bfloat162float(p[i + half]), pos, i, half, theta,
                      y1, y2);
    p[i] = __float2bfloat16_rn(y1);
    p[i + half] = __float2bfloat16_rn(y2);
  }
}

}  // namespace

void rope_cuda(const RopeArgs& a, const ExecContext& ctx) {
  cuda::expect_cuda_dtype(a.x, DType::kBF16, "rope", "x");
  cuda::expect_cuda_dtype(a.positions, DType::kI32, "rope", "positions");
  cuda::expect_last_contiguous(a.x, "rope", "x");
  TANDEM_CHECK(a.x.ndim() == 3 && a.rotary_dim % 2 == 0 && a.rotary_dim <= a.x.dim(2),
               "rope_cuda: x {} with rotary_dim {} (must be 3-D, even, <= head_dim)",
               a.x.describe(), a.rotary_dim);
  const int64_t n = a.x.dim(0), heads = a.x.dim(1);
  TANDEM_CHECK(a.positions.numel() >= n, "rope_cuda: positions {} for {} tokens",
               a.positions.describe(), n);
  if (n * heads == 0 || a.rotary_dim == 0) return;
  cuda::launch_pdl(rope_kernel, static_cast<unsigned>(n * heads), 64, 0, cuda::stream_of(ctx),
                   a.x.data<__nv_bfloat16>(), a.x.stride(0), a.x.stride(1), heads,
                   a.positions.data<const int32_t>(), a.rotary_dim / 2, a.theta);
  cuda::check_launch("rope_kernel");
}

}  // namespace tandem::kernels
