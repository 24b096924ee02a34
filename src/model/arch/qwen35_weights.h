// The weight set of a Qwen3.5 dense model (and its MTP block), resolved from checkpoint names
// with every shape checked at load (reference section 1.2). On the CPU the tensors are zero-copy
// views of the mmap'd checkpoint; on CUDA, matrices are uploaded as bf16 (FP8 ones as FP8, below).
// Projections that read the same input are stacked by rows at load (q|k|v, GDN qkv|z|b|a,
// gate|up), so that a step reads them with one linear launch; every output row is the same dot
// product as before. gate|up is interleaved in groups of 8 rows, so that one linear also applies
// the SwiGLU.
// On CUDA the pre-norms of each block (input_layernorm, post_attention_layernorm) are folded into
// the projections that read them (kernels::fold_rms_norm: in_proj or qkv_proj, and gate|up), so
// that a step has no norm launches of its own: the linear scales by the residual's inverse RMS
// (LinearArgs::input_rms). The norm tensors stay loaded, unused by the folded forward (FP8
// matrices carry their own copy, below).
// Block-scaled FP8 checkpoints (docs/fp8.md): FP8 matrices stay FP8 with their block scales on
// every device, f8_e4m3 bytes and f32 scales (stacking and the gate|up interleave move whole rows
// and regroup the scales to match, model/fp8.h; parts that the checkpoint keeps in bf16, GDN's
// in_proj_b/a, stay a separate part of the projection, folded as above on CUDA). FP8 bytes are
// never rewritten, so on CUDA an FP8 matrix cannot take its pre-norm in: it carries the norm
// instead (LinearWeight::fold), which the FP8 kernels apply (LinearArgs::weight_fold).
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace tandem {

// A linear layer's weight as kernels::LinearArgs takes it.
struct LinearWeight {
  Tensor weight;     // [out, in] bf16|f16|f32|f8_e4m3, contiguous
  Tensor scale_inv;  // f8_e4m3 only: f32 [ceil(out / scale_block_rows), ceil(in / 128)]
  int64_t scale_block_rows = 128;
  // f8_e4m3 on CUDA only, when the norms are folded (Qwen35Weights::norms_folded): the
  // zero-centred RMSNorm weight g (bf16 [in]) that a bf16 matrix would hold as W[o, i] (1 + g_i);
  // read with LinearArgs::input_rms. Empty: nothing folded.
  Tensor fold;

  int64_t out() const { return weight.dim(0); }
  int64_t nbytes() const;  // the matrix, its scales and its fold
  int64_t numel() const { return weight.numel(); }
};

// Projections of one input stacked by rows: one part (one linear call) unless the checkpoint stores
// some of them in another dtype (an FP8 checkpoint keeping in_proj_b/a in bf16): then one part per
// run of like dtypes, each computing its own columns of the output.
using StackedWeight = std::vector<LinearWeight>;

struct AttentionWeights {
  // [2 q + 2 kv, hidden], q = n_heads_q * head_dim, kv = n_heads_kv * head_dim: q_proj (rows per
  // head [query | gate]), then k_proj, then v_proj.
  StackedWeight qkv_proj;
  LinearWeight o_proj;    // [hidden, n_heads_q * head_dim]
  Tensor q_norm, k_norm;  // [head_dim], zero-centred
};

struct GdnWeights {
  // [(2 kd + vd) + vd + 2 n_heads_v, hidden]: in_proj_qkv (rows [q | k | v]), in_proj_z,
  // in_proj_b, in_proj_a.
  StackedWeight in_proj;
  Tensor conv1d;          // [2 kd + vd, 1, conv_kernel]
  Tensor a_log, dt_bias;  // [n_heads_v]
  Tensor norm;            // [d_v], plain (not zero-centred)
  LinearWeight out_proj;  // [hidden, vd]
};

struct MlpWeights {
  // [2 inter, hidden] in the pair layout of swiglu.h (inter a multiple of 8): rows 16g..16g+7 are
  // gate_proj rows 8g..8g+7, rows 16g+8..16g+15 up_proj rows 8g..8g+7; read by linear with
  // LinearEpilogue::kSwiGluPairs. FP8: scale rows in groups of 8 (the interleave's unit).
  LinearWeight gate_up_proj;
  LinearWeight down_proj;  // [hidden, inter]
};

struct DecoderLayerWeights {
  LayerType type = LayerType::kLinearAttention;
  Tensor input_norm, post_attention_norm;  // [hidden], zero-centred
  AttentionWeights attn;                   // full-attention layers
  GdnWeights gdn;                          // linear-attention layers
  MlpWeights mlp;
};

struct MtpWeights {
  LinearWeight fc;  // [hidden, 2 * hidden], input [norm_e(embed(x_{t+1})) ; norm_h(h_t)]
  Tensor pre_fc_norm_embedding, pre_fc_norm_hidden, norm;  // [hidden], zero-centred
  DecoderLayerWeights layer;                               // a full-attention decoder layer
};

struct Qwen35Weights {
  Tensor embed_tokens;   // [vocab, hidden] (never FP8)
  Tensor final_norm;     // [hidden]
  LinearWeight lm_head;  // [vocab, hidden] (= embed_tokens when tied)
  std::vector<DecoderLayerWeights> layers;
  std::optional<MtpWeights> mtp;  // present when the checkpoint has mtp.* tensors
  // input_norm and post_attention_norm are in the projections (FP8 ones: as LinearWeight::fold)
  bool norms_folded = false;
};

// Calls f on every linear weight of the layer (the stacked parts one by one; the mixer's that the
// layer type has).
void for_each_linear(const DecoderLayerWeights& l,
                     const std::function<void(const LinearWeight&)>& f);

// Elements of the largest f8_e4m3 matrix (the MTP layer's included; 0 without FP8): what the CUDA
// FP8 prefill scratch must hold (kernels::linear_reserve_fp8_scratch).
int64_t max_fp8_numel(const Qwen35Weights& w);

using LoadProgress = std::function<void(size_t bytes_done, size_t bytes_total)>;

Qwen35Weights load_qwen35_weights(const Checkpoint& ck, const ModelConfig& cfg, Device device,
                                  const LoadProgress& progress = {});

}  // namespace tandem
