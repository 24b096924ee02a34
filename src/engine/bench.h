// Decode/verify/draft step timing at given context depths, and prefill throughput, reported
// against the hardware bounds of DESIGN.md section 6. The KV cache and GDN state are filled with
// random values at the requested depth (decode cost depends on the depth, not on the values), so
// a 32K context needs no 32K prefill; prefill is timed separately on its own prompt.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "model/arch/qwen35.h"

namespace tandem {

struct BenchOptions {
  std::vector<int64_t> contexts{1024, 8192, 32768};
  int num_speculative_tokens = 3;  // verify steps are timed for 1..k drafts
  bool mtp = true;                 // also time the MTP drafter (needs mtp weights)
  int steps = 32;                  // timed steps per measurement
  bool graphs = true;              // CUDA graphs for decode/verify steps and MTP drafts
  int64_t prefill_tokens = 0;      // 0: skip the prefill measurement
  double peak_bytes_per_s = 4.3e12;
  double peak_flops = 790e12;
};

nlohmann::json run_bench(Qwen35Model& model, const BenchOptions& opt);

}  // namespace tandem
