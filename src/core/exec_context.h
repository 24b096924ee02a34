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

// CUDA only: whether the decode-step kernels may start before their predecessor in the stream has
// finished (programmatic dependent launch, docs/cuda.md). One setting for the process, chosen by
// the command layer (`--no-pdl`) before the first launch; on by default.
namespace detail {
inline bool g_cuda_programmatic_launch = true;
}
inline void set_cuda_programmatic_launch(bool on) { detail::g_cuda_programmatic_launch = on; }
inline bool cuda_programmatic_launch() { return detail::g_cuda_programmatic_launch; }

}  // namespace tandem
