// Host side of cuda_graph.h: the CPU random fill, and the CUDA entry points' stand-ins when
// tandem is built without CUDA.
#include "core/cuda_graph.h"

namespace tandem {

float hash_uniform(uint64_t seed, uint64_t i, float lo, float hi) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 1;  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * 0x1.0p-24f;
  return lo + (hi - lo) * u;
}

#ifdef TANDEM_CUDA
void fill_uniform_cuda(const Tensor& t, uint64_t seed, float lo, float hi);
#endif

void fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi) {
  TANDEM_CHECK(t.is_contiguous(), "fill_uniform: {} is not contiguous", t.describe());
  if (t.device() == Device::kCuda) {
#ifdef TANDEM_CUDA
    return fill_uniform_cuda(t, seed, lo, hi);
#endif
  }
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = hash_uniform(seed, static_cast<uint64_t>(i), lo, hi);
    switch (t.dtype()) {
      case DType::kF32:
        t.data<float>()[i] = v;
        break;
      case DType::kBF16:
        t.data<bf16>()[i] = f32_to_bf16(v);
        break;
      case DType::kF16:
        t.data<f16>()[i] = f32_to_f16(v);
        break;
      default:
        fail("fill_uniform: {} is not a float tensor", t.describe());
    }
  }
}

#ifndef TANDEM_CUDA
namespace {
[[noreturn]] void no_cuda() {
  fail("this needs CUDA, and tandem was built without -DTANDEM_CUDA=ON");
}
}  // namespace
void device_synchronize(Device) {}
std::string device_description(Device) { return "cpu"; }
void* cuda_stream_create() { no_cuda(); }
void cuda_stream_destroy(void*) {}
CudaGraph::~CudaGraph() = default;
void CudaGraph::begin_capture(void*) { no_cuda(); }
void CudaGraph::end_capture(void*) { no_cuda(); }
void CudaGraph::abort_capture(void*) {}
void CudaGraph::launch(void*) const { no_cuda(); }
#endif

}  // namespace tandem
