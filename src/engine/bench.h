// Step costs of the batched engine at given batch sizes and context depths (issue 14 item 9):
// decode steps (1 row per sequence), verify steps (1 + k rows per sequence, k = 1..K) and MTP
// drafts, each as ms per step, tokens per second, and fractions of the step's memory bound and
// tensor-core bound (DESIGN.md section 6). The pools are filled with random values at the
// requested depth (cost depends on the depth, not on the values), so a 32K context needs no 32K
// prefill. MTP speed at a stated acceptance per draft (synthetic weights accept nothing) is the
// projection  B E_k / (verify_k + draft_k),  E_k = 1 + a + ... + a^k, with the best k (what
// speculation control converges to; k = 0 is plain decoding, so it is never below plain).
// Prefill throughput is timed separately on a prompt of its own, and a prefill chunk's cost inside
// a decode step (mixed steps) on request.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch/qwen35.h"

namespace tandem {

struct BenchOptions {
  std::vector<int64_t> contexts{1024, 8192, 32768};
  std::vector<int64_t> batches{1};
  int num_speculative_tokens = 3;  // verify steps are timed for 1..k drafts
  bool mtp = true;                 // also time the MTP drafter (needs mtp weights)
  int steps = 32;                  // timed steps per measurement
  bool graphs = true;              // CUDA graphs for decode/verify steps
  int64_t prefill_tokens = 0;      // 0: skip the prefill measurement
  // > 0: also time each batch's eager decode step with and without one request's prefill chunk of
  // this many tokens in it (what continuous arrivals cost the running decodes).
  int64_t mixed_prefill_tokens = 0;
  double acceptance = 0.6;           // per-draft acceptance of the MTP projection
  int64_t draft_vocab_size = 0;      // > 0: the drafter's vocabulary is token ids 0 .. N - 1
  double peak_bytes_per_s = 4.3e12;  // the bounds' hardware (hardware_bounds)
  double peak_flops = 790e12;
  std::string bounds_basis = "H200";
};

// The memory and tensor-core peaks the bench divides by, from the device's description
// (device_description): the H200's measured copy bandwidth and dense bf16 rate (DESIGN.md section
// 6); an H100's bandwidth derived from its specification (SXM 3.35 TB/s, PCIe 2.0, NVL 3.9) at
// the H200's measured / specified ratio (not measured); any other device the H200's, saying so in
// `basis`.
struct HardwareBounds {
  double bytes_per_s, flops;
  std::string basis;
};
HardwareBounds hardware_bounds(std::string_view device);

nlohmann::json run_bench(Qwen35Model& model, const BenchOptions& opt);

}  // namespace tandem
