// CUDA side of cuda_graph.h: streams, graphs, synchronisation and the device random fill.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/cuda_graph.h"

namespace tandem {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("{} failed: {}", what, cudaGetErrorString(e));
}

__device__ float hash_uniform_dev(uint64_t seed, uint64_t i, float lo, float hi) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * 0x1.0p-24f;
  return lo + (hi - lo) * u;
}

template <typename T>
__global__ void fill_kernel(T* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = hash_uniform_dev(seed, static_cast<uint64_t>(i), lo, hi);
    if constexpr (std::is_same_v<T, float>) {
      p[i] = v;
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      p[i] = __float2bfloat16(v);
    } else {
      p[i] = __float2half(v);
    }
  }
}
}  // namespace

void device_synchronize(Device d) {
  if (d == Device::kCuda) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

std::string device_description(Device d) {
  if (d == Device::kCpu) return "cpu";
  cudaDeviceProp p{};
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
  return fmt::format("{}, {} SMs, {:.1f} GiB", p.name, p.multiProcessorCount,
                     static_cast<double>(p.totalGlobalMem) / (1 << 30));
}

void* cuda_stream_create() {
  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  return s;
}

void cuda_stream_destroy(void* s) {
  if (s) cudaStreamDestroy(static_cast<cudaStream_t>(s));
}

CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void CudaGraph::begin_capture(void* stream) {
  check(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
}

void CudaGraph::end_capture(void* stream) {
  cudaGraph_t g;
  check(cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &g), "cudaStreamEndCapture");
  graph_ = g;
  cudaGraphExec_t e;
  check(cudaGraphInstantiate(&e, g, 0), "cudaGraphInstantiate");
  exec_ = e;
  // Uploaded now, so that the first launch (during decoding) does not pay for it.
  check(cudaGraphUpload(e, static_cast<cudaStream_t>(stream)), "cudaGraphUpload");
}

void CudaGraph::abort_capture(void* stream) {
  // Ends the capture whatever state it is in (active or invalidated by the failed call); errors
  // are dropped: the caller's exception says what failed.
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &g);
  if (g) cudaGraphDestroy(g);
  (void)cudaGetLastError();
}

void CudaGraph::launch(void* stream) const {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream)),
        "cudaGraphLaunch");
}

void fill_uniform_cuda(const Tensor& t, uint64_t seed, float lo, float hi) {
  const int64_t n = t.numel();
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65536));
  switch (t.dtype()) {
    case DType::kF32:
      fill_kernel<<<blocks, 256>>>(t.data<float>(), n, seed, lo, hi);
      break;
    case DType::kBF16:
      fill_kernel<<<blocks, 256>>>(t.data<__nv_bfloat16>(), n, seed, lo, hi);
      break;
    case DType::kF16:
      fill_kernel<<<blocks, 256>>>(t.data<__half>(), n, seed, lo, hi);
      break;
    default:
      fail("fill_uniform: {} is not a float tensor", t.describe());
  }
  check(cudaGetLastError(), "fill_uniform kernel launch");
}

}  // namespace tandem
