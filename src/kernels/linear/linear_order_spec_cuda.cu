// The bf16 decode order's specification on CUDA (tests and benchmarks only): one warp per 16 weight
// rows and 8 tokens computes every output exactly as linear_plan.h defines the order, with plain
// global loads into mma.sync m16n8k16 fragments of natural k sets, no ring, no split of the work:
// per rank of the plan, class c's chain from +0 over its 128-k pieces of the rank's 1024-k chunks,
// the classes added left to right, the ranks left to right. The decode kernels
// (linear_persistent_cuda.cu, linear_wgmma_cuda.cu) must give its bits
// (CudaRowInvariance.LinearDecodeOrderSpec); it is slow and not used by any model.
#include "kernels/cuda_common.cuh"
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_cuda.cuh"
#include "kernels/linear/linear_plan.h"

namespace tandem::kernels {

namespace {

struct SpecArgs {
  const __nv_bfloat16* w;
  const __nv_bfloat16* x;
  float* out;
  int64_t out_f, in, x_stride, out_stride, range_k;
  int splits, n;
};

__global__ void __launch_bounds__(32) decode_order_spec_kernel(const SpecArgs a) {
  constexpr int kClasses = static_cast<int>(kLinearPlanChunkK / kPieceK);
  const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * 16 + g, r1 = r0 + 8;
  const int tok = static_cast<int>(blockIdx.y) * 8 + g;
  // Elements k and k + 1 (k even, in a multiple of 8: both inside or both past the matrix).
  const auto wpair = [&](int64_t row, int64_t k) -> uint32_t {
    if (row >= a.out_f || k >= a.in) return 0u;
    return *reinterpret_cast<const uint32_t*>(a.w + row * a.in + k);
  };
  const auto xpair = [&](int64_t k) -> uint32_t {
    if (tok >= a.n || k >= a.in) return 0u;
    return *reinterpret_cast<const uint32_t*>(a.x + tok * a.x_stride + k);
  };
  float total[4] = {0.f, 0.f, 0.f, 0.f};
  for (int r = 0; r < a.splits; ++r) {
    const int64_t k0 = r * a.range_k, k_end = min(a.in, k0 + a.range_k);
    const int64_t chunks = (k_end - k0 + kLinearPlanChunkK - 1) / kLinearPlanChunkK;
    float range[4];
    for (int c = 0; c < kClasses; ++c) {
      float chain[4] = {0.f, 0.f, 0.f, 0.f};
      for (int64_t i = 0; i < chunks; ++i) {
        for (int64_t k = k0 + i * kLinearPlanChunkK + c * kPieceK;
             k < k0 + i * kLinearPlanChunkK + (c + 1) * kPieceK && k < k_end; k += 16) {
          mma_bf16(chain, wpair(r0, k + 2 * t), wpair(r1, k + 2 * t), wpair(r0, k + 8 + 2 * t),
                   wpair(r1, k + 8 + 2 * t), xpair(k + 2 * t), xpair(k + 8 + 2 * t));
        }
      }
      for (int e = 0; e < 4; ++e) range[e] = c == 0 ? chain[e] : range[e] + chain[e];
    }
    for (int e = 0; e < 4; ++e) total[e] = r == 0 ? range[e] : total[e] + range[e];
  }
  for (int e = 0; e < 4; ++e) {  // c0, c1: row g; c2, c3: row g + 8; tokens 2t, 2t + 1
    const int64_t row = e >= 2 ? r1 : r0;
    const int64_t tk = static_cast<int64_t>(blockIdx.y) * 8 + 2 * t + (e & 1);
    if (row < a.out_f && tk < a.n) a.out[tk * a.out_stride + row] = total[e];
  }
}

}  // namespace

void linear_decode_order_spec(const LinearArgs& a, const ExecContext& ctx) {
  const int64_t n = a.x.dim(0), in = a.weight.dim(1), out_f = a.weight.dim(0);
  TANDEM_CHECK(
      ctx.device == Device::kCuda && a.x.dtype() == DType::kBF16 &&
          a.weight.dtype() == DType::kBF16 && a.weight.is_contiguous() &&
          a.out.dtype() == DType::kF32 && a.x.dim(1) == in && a.out.dim(0) == n &&
          a.out.dim(1) == out_f && in % 8 == 0 && a.x.stride(0) % 2 == 0 && a.x.stride(1) == 1 &&
          a.out.stride(1) == 1 && a.epilogue == LinearEpilogue::kNone && !a.input_rms,
      "linear_decode_order_spec: bf16 x [n, in] and weight [out, in] (in a multiple of 8), "
      "f32 out [n, out], no epilogue, on CUDA; got x {}, weight {}, out {}",
      a.x.describe(), a.weight.describe(), a.out.describe());
  const LinearPlan plan = plan_linear((out_f + 15) / 16, in, kLinearPlanChunkK,
                                      linear_plan_resident(), cuda::sm_count(), kLinearRangeAlign);
  const SpecArgs args{a.weight.data<const __nv_bfloat16>(),
                      a.x.data<const __nv_bfloat16>(),
                      a.out.data<float>(),
                      out_f,
                      in,
                      a.x.stride(0),
                      a.out.stride(0),
                      plan.range_k,
                      plan.splits,
                      static_cast<int>(n)};
  decode_order_spec_kernel<<<dim3(static_cast<unsigned>((out_f + 15) / 16),
                                  static_cast<unsigned>((n + 7) / 8)),
                             32, 0, cuda::stream_of(ctx)>>>(args);
  cuda::check_launch("decode_order_spec_kernel");
}

}  // namespace tandem::kernels
