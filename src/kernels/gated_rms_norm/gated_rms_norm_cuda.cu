// CUDA gated RMSNorm of the GDN output: one block per (token, value head); plain weight and a
// silu(z) gate applied after the norm, fp32 math. `o` may be bf16 or f32 (the GDN kernel may hand
// over either); z and out are bf16. Fixed-order block reduction (row invariance). The same kernel
// also serves a batched GDN call whose norm must touch only its sequences' rows
// (gated_rms_norm_rows_cuda, gated_delta_rule_cuda.cuh): the row range is read on the device.
#include <algorithm>

#include "kernels/cuda_common.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"
#include "kernels/gated_rms_norm/gated_rms_norm.h"

namespace tandem::kernels {

namespace {

// row_start == nullptr: block b normalises row b / heads. Otherwise rows are counted from
// row_start[0] and blocks past row_start[n_seqs] (or n_rows) leave, after the wait, so that the
// grid still completes after its predecessor.
template <typename TO>
__global__ void gated_rms_norm_kernel(const TO* o, int64_t o_s0, int64_t o_s1,
                                      const __nv_bfloat16* z, int64_t z_s0, int64_t z_s1,
                                      cuda::AnyFloatPtr w, __nv_bfloat16* out, int64_t out_s0,
                                      int64_t out_s1, int64_t heads, int64_t dv, float eps,
                                      const int32_t* row_start, int64_t n_seqs, int64_t n_rows) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  __shared__ float scratch[32];
  int64_t t = blockIdx.x / heads;
  const int64_t h = blockIdx.x % heads;
  if (row_start != nullptr) {
    t += row_start[0];
    if (t < 0 || t >= row_start[n_seqs] || t >= n_rows) return;  // uniform in the block
  }
  const TO* op = o + t * o_s0 + h * o_s1;
  const __nv_bfloat16* zp = z + t * z_s0 + h * z_s1;
  __nv_bfloat16* y = out + t * out_s0 + h * out_s1;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) {
    const float v = cuda::to_float(op[i]);
    ss += v * v;
  }
  ss = cuda::block_sum(ss, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(dv) + eps);
  for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) {
    const float v = cuda::to_float(op[i]);
    y[i] = __float2bfloat16_rn(((v * inv) * w[i]) * cuda::silu(__bfloat162float(zp[i])));
  }
}

void launch_norm(const GatedRmsNormArgs& a, const int32_t* row_start, int64_t n_seqs, int64_t rows,
                 const ExecContext& ctx) {
  cuda::expect_cuda(a.o, "gated_rms_norm", "o");
  cuda::expect_cuda_dtype(a.z, DType::kBF16, "gated_rms_norm", "z");
  cuda::expect_cuda_dtype(a.out, DType::kBF16, "gated_rms_norm", "out");
  for (const Tensor* t : {&a.o, &a.z, &a.out})
    cuda::expect_last_contiguous(*t, "gated_rms_norm", "o/z/out");
  const int64_t heads = a.o.dim(1), dv = a.o.dim(2);
  TANDEM_CHECK(a.z.shape() == a.o.shape() && a.out.shape() == a.o.shape(),
               "gated_rms_norm_cuda: o {} z {} out {} differ", a.o.describe(), a.z.describe(),
               a.out.describe());
  const cuda::AnyFloatPtr w = cuda::any_float(a.weight, "gated_rms_norm", "weight");
  TANDEM_CHECK(a.weight.numel() == dv, "gated_rms_norm_cuda: weight {} does not match d_v {}",
               a.weight.describe(), dv);
  if (rows * heads == 0) return;
  const unsigned blocks = static_cast<unsigned>(rows * heads);
  const cudaStream_t s = cuda::stream_of(ctx);
  const auto* z = a.z.data<const __nv_bfloat16>();
  auto* out = a.out.data<__nv_bfloat16>();
  if (a.o.dtype() == DType::kF32) {
    cuda::launch_pdl(gated_rms_norm_kernel<float>, blocks, 128, 0, s, a.o.data<const float>(),
                     a.o.stride(0), a.o.stride(1), z, a.z.stride(0), a.z.stride(1), w, out,
                     a.out.stride(0), a.out.stride(1), heads, dv, a.eps, row_start, n_seqs,
                     a.o.dim(0));
  } else {
    cuda::expect_cuda_dtype(a.o, DType::kBF16, "gated_rms_norm", "o");
    cuda::launch_pdl(gated_rms_norm_kernel<__nv_bfloat16>, blocks, 128, 0, s,
                     a.o.data<const __nv_bfloat16>(), a.o.stride(0), a.o.stride(1), z,
                     a.z.stride(0), a.z.stride(1), w, out, a.out.stride(0), a.out.stride(1), heads,
                     dv, a.eps, row_start, n_seqs, a.o.dim(0));
  }
  cuda::check_launch("gated_rms_norm_kernel");
}

}  // namespace

void gated_rms_norm_cuda(const GatedRmsNormArgs& a, const ExecContext& ctx) {
  launch_norm(a, nullptr, 0, a.o.dim(0), ctx);
}

void gated_rms_norm_rows_cuda(const GatedRmsNormArgs& a, const int32_t* row_start, int64_t n_seqs,
                              int64_t max_rows_total, const ExecContext& ctx) {
  if (n_seqs <= 0) return;
  launch_norm(a, row_start, n_seqs, std::min(max_rows_total, a.o.dim(0)), ctx);
}

}  // namespace tandem::kernels
