// CUDA embedding lookup: blocks of 256 elements of a token's row (grid.y) copy table[ids[t]] into
// a bf16 activation row, one element per thread: every load of the row is in flight at once
// (one block walking the row took one memory latency per 256 elements, ~10 us at hidden 5120).
// Token ids are read on the device (graph-safe); an id outside [0, vocab) yields a NaN row rather
// than an out-of-bounds read, so the error is visible downstream instead of silent.
#include "kernels/cuda_common.cuh"
#include "kernels/embedding/embedding.h"

namespace tandem::kernels {

namespace {

__global__ void embedding_kernel(const int32_t* ids, cuda::AnyFloatPtr table, int64_t vocab,
                                 int64_t hidden, __nv_bfloat16* out, int64_t out_stride) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  const int64_t t = blockIdx.x, i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (i >= hidden) return;
  const int32_t id = ids[t];
  const bool valid = id >= 0 && id < vocab;
  out[t * out_stride + i] =
      __float2bfloat16_rn(valid ? table[id * hidden + i] : __int_as_float(0x7fc00000));
}

}  // namespace

void embedding_cuda(const EmbeddingArgs& a, const ExecContext& ctx) {
  cuda::expect_cuda_dtype(a.ids, DType::kI32, "embedding", "ids");
  cuda::expect_cuda_dtype(a.out, DType::kBF16, "embedding", "out");
  cuda::expect_last_contiguous(a.out, "embedding", "out");
  const int64_t n = a.ids.dim(0), vocab = a.table.dim(0), hidden = a.table.dim(1);
  TANDEM_CHECK(a.out.dim(0) == n && a.out.dim(1) == hidden,
               "embedding_cuda: out {} does not match ids {} and table {}", a.out.describe(),
               a.ids.describe(), a.table.describe());
  const cuda::AnyFloatPtr table = cuda::any_float(a.table, "embedding", "table");
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(cuda::ceil_div(hidden, 256)));
  cuda::launch_pdl(embedding_kernel, grid, 256, 0, cuda::stream_of(ctx),
                   a.ids.data<const int32_t>(), table, vocab, hidden, a.out.data<__nv_bfloat16>(),
                   a.out.stride(0));
  cuda::check_launch("embedding_kernel");
}

}  // namespace tandem::kernels
