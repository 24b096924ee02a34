// Timing diagnostic, never for output: leave a class of CUDA kernels out of every step, so that
// a step's time with and without it says what the class costs inside the step (overlap, PDL and
// graph replay included), which no isolated kernel timing or serialised profile shows. A skipped
// op launches nothing and leaves its outputs as they were: what the model computes is garbage.
// `tandem bench --diag-skip CLASS,...` only; the server and generate never set it.
#pragma once

#include <array>
#include <atomic>
#include <string>
#include <vector>

namespace tandem::kernels {

enum class DiagClass {
  kGdr,        // gated_delta_rule_cuda (recurrent and chunked, with its fused norm)
  kConv,       // conv1d_cuda
  kAttention,  // attention_inputs_cuda, attention_cuda
};

// Which classes are left out. Inline here (not in diag_skip.cpp) because the CUDA library, which
// the engine library links, reads it.
inline std::array<std::atomic<bool>, 3> g_diag_skipped{};

// Whether the class is left out (an atomic load; false unless set_diag_skips named it).
inline bool diag_skipped(DiagClass c) {
  return g_diag_skipped[static_cast<size_t>(c)].load(std::memory_order_relaxed);
}
// Leaves out the classes named in a comma-separated list (gdr, conv, attention; the rest back
// in; empty: none) and returns the names. An unknown name is an error that lists the known ones.
std::vector<std::string> set_diag_skips(const std::string& csv);

}  // namespace tandem::kernels
