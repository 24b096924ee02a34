// Helpers shared by the CUDA kernels: error checks that throw tandem::Error naming the call,
// bf16/f32 element access, fixed-order warp/block reductions and host-side argument checks.
// Reductions here always combine lanes in the same butterfly order, so a value's bits depend only
// on its inputs, never on launch size (DESIGN.md inv. 2). No kernels live here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "core/error.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels::cuda {

// Throws tandem::Error("<call> failed: <cuda message>") on any CUDA error.
inline void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    fail("{} failed: {} ({})", call, cudaGetErrorString(e), cudaGetErrorName(e));
}
#define TANDEM_CUDA_CHECK(expr) ::tandem::kernels::cuda::check((expr), #expr)

// After a launch: reports a bad configuration immediately, naming the kernel.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

inline cudaStream_t stream_of(const ExecContext& ctx) {
  return static_cast<cudaStream_t>(ctx.cuda_stream);
}

// ---- host-side argument checks (programming errors name op, tensor, expected and actual) ----

inline void expect_cuda(const Tensor& t, const char* op, const char* what) {
  TANDEM_CHECK(t.device() == Device::kCuda, "{}_cuda: {} must be on cuda, got {}", op, what,
               t.describe());
}
inline void expect_cuda_dtype(const Tensor& t, DType dt, const char* op, const char* what) {
  expect_cuda(t, op, what);
  TANDEM_CHECK(t.dtype() == dt, "{}_cuda: {} must be {} on cuda, got {} (unsupported dtype)", op,
               what, dtype_name(dt), t.describe());
}
inline void expect_last_contiguous(const Tensor& t, const char* op, const char* what) {
  TANDEM_CHECK(t.ndim() == 0 || t.stride(-1) == 1,
               "{}_cuda: {} must have a contiguous last dim, got {} strides {}", op, what,
               t.describe(), shape_str(t.strides()));
}
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// bf16 rows of a [rows, (heads,) dim] view that 16-byte loads can read: aligned base, strides in
// multiples of 8 elements (the last dim contiguous is checked by the caller).
inline bool rows_16b_loadable(const Tensor& t) {
  return aligned16(t.raw()) && t.stride(0) % 8 == 0 && (t.ndim() < 3 || t.stride(1) % 8 == 0);
}
inline bool is_float_dtype(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

// ---- element access ----

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// Small float vectors whose dtype is only known at run time (norm weights, A_log, dt_bias): the
// dtype travels as a kernel argument so one kernel serves all three.
struct AnyFloatPtr {
  const void* p = nullptr;
  DType dtype = DType::kF32;
  __device__ __forceinline__ float operator[](int64_t i) const {
    switch (dtype) {
      case DType::kBF16:
        return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
      case DType::kF16:
        return __half2float(static_cast<const __half*>(p)[i]);
      default:
        return static_cast<const float*>(p)[i];
    }
  }
};

inline AnyFloatPtr any_float(const Tensor& t, const char* op, const char* what) {
  expect_cuda(t, op, what);
  TANDEM_CHECK(is_float_dtype(t.dtype()) && t.is_contiguous(),
               "{}_cuda: {} must be a contiguous f32/bf16/f16 vector, got {}", op, what,
               t.describe());
  return AnyFloatPtr{t.raw(), t.dtype()};
}

// 8 bf16 values loaded with one 16-byte access, widened to fp32.
struct Bf16x8 {
  float v[8];
};
__device__ __forceinline__ Bf16x8 load_bf16x8(const __nv_bfloat16* p) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  Bf16x8 r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    r.v[2 * i] = f.x;
    r.v[2 * i + 1] = f.y;
  }
  return r;
}

// ---- programmatic dependent launch (sm_90) ----
// A kernel that calls pdl_trigger() lets the next kernel in the stream, if that one is launched
// with launch_pdl(), start early (its blocks become resident and may run their prologue,
// e.g. fetch weights). The early kernel calls pdl_wait() before it touches anything its
// predecessor writes, or writes anything its predecessor reads: pdl_wait() returns once the
// predecessor grid has completed and its memory is visible. Both are no-ops otherwise.
__device__ __forceinline__ void pdl_trigger() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
// The first statement of every kernel launched with launch_pdl(): wait for the predecessor, then
// let the successor be scheduled (so at most one kernel waits early at a time). Since every kernel
// waits before it triggers, a kernel that starts early finds every kernel two or more launches
// back completed: what only those wrote (weights; a recurrent state that only its own op writes,
// loaded through L2 with __ldcg) may be read before pdl_wait().
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_trigger();
}

// launch_pdl (below) in thread-block clusters of `cluster_x` blocks along x (1: no cluster).
template <typename... KArgs, typename... Args>
void launch_pdl_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, unsigned cluster_x,
                        size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = cuda_programmatic_launch() ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = cluster_x;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = cluster_x > 1 ? 2 : 1;
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), "cudaLaunchKernelEx");
}
// Launches `kernel` with programmatic dependent launch: it may become resident while the previous
// kernel in the stream still runs, so its launch latency hides; it must start with pdl_begin().
// Without cuda_programmatic_launch() (exec_context.h) it is an ordinary launch.
template <typename... KArgs, typename... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  launch_pdl_cluster(kernel, grid, block, 1, smem, stream, std::forward<Args>(args)...);
}

// ---- fixed-order reductions ----

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats. Order: each warp butterflies, then warp totals in index order.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < n_warps; ++w) total += scratch[w];
  return total;
}

__device__ __forceinline__ float silu(float x) { return x / (1.f + expf(-x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// Streaming multiprocessors of the current device (read once per process).
inline int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    TANDEM_CUDA_CHECK(cudaGetDevice(&dev));
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}

inline unsigned ceil_div(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace tandem::kernels::cuda
