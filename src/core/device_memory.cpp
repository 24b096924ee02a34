// Host memory (64-byte aligned) and the dispatch to the CUDA memory functions when built with them.
#include <cstdlib>
#include <cstring>

#include "core/device.h"
#include "core/error.h"

namespace tandem {

#ifdef TANDEM_CUDA
void* cuda_alloc(size_t bytes);
void cuda_free(void* p);
void cuda_copy(void* dst, bool dst_dev, const void* src, bool src_dev, size_t bytes);
void cuda_memset_zero(void* p, size_t bytes);
bool cuda_device_present();
void cuda_memory_info(size_t* free_bytes, size_t* total_bytes);
#endif

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  fail("unknown device '{}': expected 'cpu' or 'cuda'", name);
}

bool cuda_available() {
#ifdef TANDEM_CUDA
  return cuda_device_present();
#else
  return false;
#endif
}

[[noreturn, maybe_unused]] static void no_cuda() {
  fail(
      "device 'cuda' requested but tandem was built without CUDA (configure with "
      "-DTANDEM_CUDA=ON)");
}

void* device_alloc(Device d, size_t bytes) {
  if (d == Device::kCpu) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    TANDEM_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
    return p;
  }
#ifdef TANDEM_CUDA
  return cuda_alloc(bytes);
#else
  no_cuda();
#endif
}

void device_free(Device d, void* p) {
  if (d == Device::kCpu) {
    std::free(p);
    return;
  }
#ifdef TANDEM_CUDA
  cuda_free(p);
#endif
}

void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev == Device::kCpu && src_dev == Device::kCpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef TANDEM_CUDA
  cuda_copy(dst, dst_dev == Device::kCuda, src, src_dev == Device::kCuda, bytes);
#else
  no_cuda();
#endif
}

DeviceMemoryInfo device_memory_info(Device d) {
  DeviceMemoryInfo m;
  if (d == Device::kCpu) return m;
#ifdef TANDEM_CUDA
  cuda_memory_info(&m.free_bytes, &m.total_bytes);
  return m;
#else
  no_cuda();
#endif
}

void device_memset_zero(Device d, void* p, size_t bytes) {
  if (d == Device::kCpu) {
    std::memset(p, 0, bytes);
    return;
  }
#ifdef TANDEM_CUDA
  cuda_memset_zero(p, bytes);
#else
  no_cuda();
#endif
}

}  // namespace tandem
