// CUDA streams, graph capture/replay, device synchronisation and random fills, behind opaque
// handles so that code above core needs no CUDA headers. Without TANDEM_CUDA every CUDA entry
// point throws an Error naming the build option.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace tandem {

void device_synchronize(Device d);
std::string device_description(Device d);  // e.g. "NVIDIA H200, 132 SMs, 139.8 GiB"

void* cuda_stream_create();  // a blocking stream (ordered with synchronous copies)
void cuda_stream_destroy(void* stream);

// One captured sequence of launches, replayed with launch(); the caller keeps every buffer the
// captured kernels touch alive and writes step metadata into them between launches.
class CudaGraph {
 public:
  CudaGraph() = default;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph();
  void begin_capture(void* stream);
  void end_capture(void* stream);  // instantiates and uploads the graph on `stream`
  // Ends a capture that failed (an exception while recording), so that the stream can be used and
  // freed again and the exception reaches the caller.
  static void abort_capture(void* stream);
  void launch(void* stream) const;
  bool ready() const { return exec_ != nullptr; }

 private:
  void* graph_ = nullptr;
  void* exec_ = nullptr;
};

// Fills a float tensor (f32/bf16/f16, any device, contiguous) with uniform values in [lo, hi)
// from a counter-based hash of (seed, index): the same values on every device.
void fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi);
// Element i of fill_uniform's values on the host (for callers that fill in parallel).
float hash_uniform(uint64_t seed, uint64_t i, float lo, float hi);

}  // namespace tandem
