// CUDA SwiGLU: out = silu(gate) * up elementwise, bf16 in and out, fp32 math. Purely elementwise,
// so every element is computed the same way whatever the launch size.
#include "kernels/cuda_common.cuh"
#include "kernels/swiglu/swiglu.h"

namespace tandem::kernels {

namespace {

__global__ void swiglu_kernel(const __nv_bfloat16* gate, int64_t gate_stride,
                              const __nv_bfloat16* up, int64_t up_stride, __nv_bfloat16* out,
                              int64_t out_stride, int64_t inter) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  const int64_t t = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= inter) return;
  const float g = __bfloat162float(gate[t * gate_stride + i]);
  const float u = __bfloat162float(up[t * up_stride + i]);
  out[t * out_stride + i] = __float2bfloat16_rn(cuda::silu(g) * u);
}

}  // namespace

void swiglu_cuda(const SwigluArgs& a, const ExecContext& ctx) {
  cuda::expect_cuda_dtype(a.gate, DType::kBF16, "swiglu", "gate");
  cuda::expect_cuda_dtype(a.up, DType::kBF16, "swiglu", "up");
  cuda::expect_cuda_dtype(a.out, DType::kBF16, "swiglu", "out");
  cuda::expect_last_contiguous(a.gate, "swiglu", "gate");
  cuda::expect_last_contiguous(a.up, "swiglu", "up");
  cuda::expect_last_contiguous(a.out, "swiglu", "out");
  const int64_t n = a.gate.dim(0), inter = a.gate.dim(1);
  TANDEM_CHECK(a.up.shape() == a.gate.shape() && a.out.shape() == a.gate.shape(),
               "swiglu_cuda: gate {} up {} out {} differ", a.gate.describe(), a.up.describe(),
               a.out.describe());
  if (n == 0 || inter == 0) return;
  const dim3 grid(cuda::ceil_div(inter, 256), static_cast<unsigned>(n));
  cuda::launch_pdl(swiglu_kernel, grid, 256, 0, cuda::stream_of(ctx),
                   a.gate.data<const __nv_bfloat16>(), a.gate.stride(0),
                   a.up.data<const __nv_bfloat16>(), a.up.stride(0), a.out.data<__nv_bfloat16>(),
                   a.out.stride(0), inter);
  cuda::check_launch("swiglu_kernel");
}

}  // namespace tandem::kernels
