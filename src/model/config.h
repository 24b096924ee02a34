// ModelConfig: the typed view of a Hugging Face config.json for Qwen3.5 dense models, in both
// released layouts (qwen3_5 VL wrapper with text_config, and qwen3_5_text). Everything the engine
// needs is resolved here once (layer types, RoPE fields, tying, weight-name prefix, quantization).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

enum class LayerType { kLinearAttention, kFullAttention };

// config.json's quantization_config. The one layout accepted is the released block-scaled FP8 one
// (quant_method "fp8", fmt "e4m3", weight_block_size [128, 128], activation_scheme "dynamic"):
// F8_E4M3 linear weights, each with an f32 `<weight>_scale_inv` of one scale per block
// (docs/fp8.md). Anything else is refused at load, naming the field.
struct QuantizationConfig {
  bool fp8 = false;  // false: no quantization_config, every tensor is bf16/f16/f32
  int64_t block_rows = 128, block_cols = 128;
  // Module names (weight name without ".weight") or dotted parts of them that the checkpoint
  // keeps in bf16; a listed module stored F8_E4M3 is an error.
  std::vector<std::string> modules_to_not_convert;
};

struct ModelConfig {
  std::string model_type;     // as in config.json: qwen3_5 | qwen3_5_text
  std::string weight_prefix;  // "model.language_model." or "model."
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  std::vector<LayerType> layer_types;
  // Full attention.
  int64_t num_heads_q = 0, num_heads_kv = 0, head_dim = 0;
  int64_t rotary_dim = 0;
  float rope_theta = 0.f;
  // Gated DeltaNet.
  int64_t gdn_heads_k = 0, gdn_heads_v = 0, gdn_d_k = 0, gdn_d_v = 0, conv_kernel = 0;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  int64_t mtp_num_layers = 0;
  // config.json's eos_token_id (text_config's first), then generation_config.json's others
  // (from_dir): the tokens that end generation.
  std::vector<int32_t> eos_token_ids;
  QuantizationConfig quantization;

  int64_t gdn_key_dim() const { return gdn_heads_k * gdn_d_k; }
  int64_t gdn_value_dim() const { return gdn_heads_v * gdn_d_v; }
  int64_t gdn_conv_channels() const { return 2 * gdn_key_dim() + gdn_value_dim(); }
  int64_t num_gdn_layers() const;
  int64_t num_attention_layers() const { return num_layers - num_gdn_layers(); }

  // Reads DIR/config.json; throws tandem::Error naming the file and field on any problem.
  static ModelConfig from_dir(const std::string& model_dir);
  static ModelConfig from_file(const std::string& config_json_path);
  std::string summary() const;  // one line per field group, printed at start-up
};

}  // namespace tandem
