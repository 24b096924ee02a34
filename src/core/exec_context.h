// ExecContext: where and how a kernel runs. Passed explicitly to every kernel entry point
// (no global current stream, STYLE.md rule 7). On the CPU, `n_threads` splits work across output
// features only, never across a reduction, so results do not depend on it (DESIGN.md inv. 2).
#pragma once

#include "core/device.h"

namespace tandem {

struct ExecContext {
  Device device = Device::kCpu;
  int n_threads = 1;
  void* cuda_stream = nullptr;  // cudaStream_t when device == kCuda
};

}  // namespace tandem
