// Where a buffer lives. The CUDA stream is an explicit parameter wherever work is issued (STYLE.md
// rule 7); core only names devices and moves bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem {

enum class Device : uint8_t { kCpu, kCuda };

constexpr std::string_view device_name(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

Device parse_device(std::string_view name);  // "cpu" | "cuda"; throws tandem::Error otherwise

// Byte-level memory services. The CUDA versions live in device_memory_cuda.cu; without
// TANDEM_CUDA they throw an Error naming the build option.
bool cuda_available();
void* device_alloc(Device d, size_t bytes);
void device_free(Device d, void* p);
// Synchronous copy between any two devices (not for the decode hot path).
void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
void device_memset_zero(Device d, void* p, size_t bytes);

// Free and total device memory (cuda); zeros on the cpu, whose budget the caller sets.
struct DeviceMemoryInfo {
  size_t free_bytes = 0, total_bytes = 0;
};
DeviceMemoryInfo device_memory_info(Device d);

}  // namespace tandem
