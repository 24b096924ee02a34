// The CUDA side of core/device_memory.cpp: plain cudaMalloc (never managed memory), synchronous
// copies and memsets for setup paths. Every CUDA return code is checked and turned into a
// tandem::Error naming the call; nothing here is used on the decode hot path.
#include <cuda_runtime.h>

#include <cstddef>

#include "core/error.h"

namespace tandem {

namespace {

void check(cudaError_t e, const char* call, size_t bytes) {
  if (e != cudaSuccess) {
    fail("{} failed ({} bytes): {} ({})", call, bytes, cudaGetErrorString(e), cudaGetErrorName(e));
  }
}

}  // namespace

void* cuda_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes == 0 ? 256 : bytes), "cudaMalloc", bytes);
  return p;
}

void cuda_free(void* p) {
  if (p != nullptr) check(cudaFree(p), "cudaFree", 0);
}

void cuda_copy(void* dst, bool dst_dev, const void* src, bool src_dev, size_t bytes) {
  const cudaMemcpyKind kind = dst_dev
                                  ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                  : (src_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  check(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy", bytes);
}

void cuda_memset_zero(void* p, size_t bytes) {
  check(cudaMemset(p, 0, bytes), "cudaMemset", bytes);
}

void cuda_memory_info(size_t* free_bytes, size_t* total_bytes) {
  check(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo", 0);
}

bool cuda_device_present() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return n > 0;
}

}  // namespace tandem
