// Random weights for a config.json, made directly on the target device, so that real model shapes
// (e.g. Qwen3.5-27B) can be timed without a checkpoint. Values are small and varied (std ~0.02
// matrices, norms near their identity, GDN gates spread), never zeros. Not for correctness work.
#pragma once

#include <cstdint>

#include "model/arch/qwen35_weights.h"

namespace tandem {

Qwen35Weights synthetic_qwen35_weights(const ModelConfig& cfg, Device device, uint64_t seed,
                                       bool with_mtp);

// Bytes of every weight a decode step reads (matrices, norms, one embedding row, lm_head): 1 per
// FP8 element plus its block scales (and, on CUDA, its folded norm), 2 per bf16 element.
int64_t weight_bytes_per_step(const Qwen35Weights& w);
// Elements of the same tensors (FLOP counts).
int64_t weight_params_per_step(const Qwen35Weights& w);

}  // namespace tandem
