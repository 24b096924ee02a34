// CUDA row gather/scatter: one block per pair, 16-byte copies when the rows allow them.
#include "kernels/copy_rows/copy_rows.h"
#include "kernels/cuda_common.cuh"

namespace tandem::kernels {

namespace {

template <typename T>
__global__ void copy_rows_kernel(const T* in, int64_t in_stride, int64_t in_rows, T* out,
                                 int64_t out_stride, int64_t out_rows, const int32_t* src,
                                 const int32_t* dst, int64_t width) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  const int32_t s = src[blockIdx.x], d = dst[blockIdx.x];
  if (s < 0 || s >= in_rows || d < 0 || d >= out_rows) return;  // bad index: nothing written
  const T* from = in + s * in_stride;
  T* to = out + d * out_stride;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) to[i] = from[i];
}

}  // namespace

void copy_rows_cuda(const CopyRowsArgs& a, const ExecContext& ctx) {
  copy_rows_expect(a);
  const int64_t n = a.src.dim(0);
  if (n == 0) return;
  const int64_t elem = dtype_size(a.in.dtype()), bytes = a.in.dim(1) * elem;
  const bool vec = bytes % 16 == 0 && (a.in.stride(0) * elem) % 16 == 0 &&
                   (a.out.stride(0) * elem) % 16 == 0 && cuda::aligned16(a.in.raw()) &&
                   cuda::aligned16(a.out.raw());
  const cudaStream_t s = cuda::stream_of(ctx);
  const int32_t* src = a.src.data<const int32_t>();
  const int32_t* dst = a.dst.data<const int32_t>();
  if (vec) {  // rows as 16-byte words
    const int64_t k = 16 / elem;
    cuda::launch_pdl(copy_rows_kernel<uint4>, dim3(static_cast<unsigned>(n)), 128, 0, s,
                     static_cast<const uint4*>(a.in.raw()), a.in.stride(0) / k, a.in.dim(0),
                     static_cast<uint4*>(a.out.raw()), a.out.stride(0) / k, a.out.dim(0), src, dst,
                     bytes / 16);
  } else {
    TANDEM_CHECK(elem == 2 || elem == 4, "copy_rows_cuda: dtype {} unsupported",
                 dtype_name(a.in.dtype()));
    if (elem == 2) {
      cuda::launch_pdl(copy_rows_kernel<uint16_t>, dim3(static_cast<unsigned>(n)), 128, 0, s,
                       static_cast<const uint16_t*>(a.in.raw()), a.in.stride(0), a.in.dim(0),
                       static_cast<uint16_t*>(a.out.raw()), a.out.stride(0), a.out.dim(0), src, dst,
                       a.in.dim(1));
    } else {
      cuda::launch_pdl(copy_rows_kernel<uint32_t>, dim3(static_cast<unsigned>(n)), 128, 0, s,
                       static_cast<const uint32_t*>(a.in.raw()), a.in.stride(0), a.in.dim(0),
                       static_cast<uint32_t*>(a.out.raw()), a.out.stride(0), a.out.dim(0), src, dst,
                       a.in.dim(1));
    }
  }
  cuda::check_launch("copy_rows_kernel");
}

}  // namespace tandem::kernels
