// CUDA SwiGLU: out = silu(gate) * up elementwise, bf16 in and out, fp32 math, over two tensors or
// one gate|up tensor in the pair layout (swiglu.h). Purely elementwise, so every element is
// computed the same way whatever the launch size.
#include "kernels/cuda_common.cuh"
#include "kernels/swiglu/swiglu.h"
#include "kernels/swiglu/swiglu_cuda.cuh"

namespace tandem::kernels {

namespace {

// kPairs: gate and up point into one gate|up row (up = gate + kSwigluPairGroup) and feature i is
// at column swiglu_gate_col(i) of both; otherwise at column i.
template <bool kPairs>
__global__ void swiglu_kernel(const __nv_bfloat16* gate, int64_t gate_stride,
                              const __nv_bfloat16* up, int64_t up_stride, __nv_bfloat16* out,
                              int64_t out_stride, int64_t inter) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  const int64_t t = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= inter) return;
  const int64_t c = kPairs ? swiglu_gate_col(i) : i;
  out[t * out_stride + i] = cuda::swiglu_bf16(gate[t * gate_stride + c], up[t * up_stride + c]);
}

}  // namespace

void swiglu_cuda(const SwigluArgs& a, const ExecContext& ctx) {
  const bool pairs = a.gate_up.raw() != nullptr;
  const Tensor& gate = pairs ? a.gate_up : a.gate;
  const Tensor& up = pairs ? a.gate_up : a.up;
  const char* gate_name = pairs ? "gate_up" : "gate";
  const char* up_name = pairs ? "gate_up" : "up";
  cuda::expect_cuda_dtype(gate, DType::kBF16, "swiglu", gate_name);
  cuda::expect_cuda_dtype(up, DType::kBF16, "swiglu", up_name);
  cuda::expect_cuda_dtype(a.out, DType::kBF16, "swiglu", "out");
  cuda::expect_last_contiguous(gate, "swiglu", gate_name);
  cuda::expect_last_contiguous(up, "swiglu", up_name);
  cuda::expect_last_contiguous(a.out, "swiglu", "out");
  const int64_t n = a.out.dim(0), inter = a.out.dim(1);
  swiglu_expect_shapes(a, "swiglu_cuda");
  if (n == 0 || inter == 0) return;
  const dim3 grid(cuda::ceil_div(inter, 256), static_cast<unsigned>(n));
  const auto* g = gate.data<const __nv_bfloat16>();
  const auto* u = up.data<const __nv_bfloat16>() + (pairs ? kSwigluPairGroup : 0);
  auto* o = a.out.data<__nv_bfloat16>();
  const cudaStream_t stream = cuda::stream_of(ctx);
  if (pairs) {
    cuda::launch_pdl(swiglu_kernel<true>, grid, 256, 0, stream, g, gate.stride(0), u, up.stride(0),
                     o, a.out.stride(0), inter);
  } else {
    cuda::launch_pdl(swiglu_kernel<false>, grid, 256, 0, stream, g, gate.stride(0), u, up.stride(0),
                     o, a.out.stride(0), inter);
  }
  cuda::check_launch("swiglu_kernel");
}

}  // namespace tandem::kernels
