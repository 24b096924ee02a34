// Name mapping and shape checks for Qwen3.5 dense checkpoints (both layouts) and mtp.* tensors.
#include "model/arch/qwen35_weights.h"

#include <string>

namespace tandem {

namespace {

class Loader {
 public:
  Loader(const Checkpoint& ck, Device device, const LoadProgress& progress)
      : ck_(ck), device_(device), progress_(progress) {}

  Tensor operator()(const std::string& name, const Shape& shape) {
    Tensor host = ck_.get(name, shape);
    done_ += static_cast<size_t>(host.nbytes());
    if (progress_) progress_(done_, ck_.total_bytes());
    if (device_ == Device::kCpu) return host;
    // Matrices go to the GPU as bf16; small vectors (norms, A_log, dt_bias) keep their dtype.
    if (host.ndim() >= 2 && host.dtype() != DType::kBF16) {
      Tensor f = host.to_f32();
      Tensor b = Tensor::zeros(f.shape(), DType::kBF16);
      for (int64_t i = 0; i < f.numel(); ++i) b.data<bf16>()[i] = f32_to_bf16(f.data<float>()[i]);
      host = b;
    }
    return host.to(device_);
  }

 private:
  const Checkpoint& ck_;
  Device device_;
  const LoadProgress& progress_;
  size_t done_ = 0;
};

DecoderLayerWeights load_layer(Loader& load, const ModelConfig& c, const std::string& p,
                               LayerType type) {
  const int64_t h = c.hidden_size;
  DecoderLayerWeights w;
  w.type = type;
  w.input_norm = load(p + "input_layernorm.weight", {h});
  w.post_attention_norm = load(p + "post_attention_layernorm.weight", {h});
  if (type == LayerType::kFullAttention) {
    const int64_t q = c.num_heads_q * c.head_dim, kv = c.num_heads_kv * c.head_dim;
    w.attn.q_proj = load(p + "self_attn.q_proj.weight", {2 * q, h});
    w.attn.k_proj = load(p + "self_attn.k_proj.weight", {kv, h});
    w.attn.v_proj = load(p + "self_attn.v_proj.weight", {kv, h});
    w.attn.o_proj = load(p + "self_attn.o_proj.weight", {h, q});
    w.attn.q_norm = load(p + "self_attn.q_norm.weight", {c.head_dim});
    w.attn.k_norm = load(p + "self_attn.k_norm.weight", {c.head_dim});
  } else {
    const int64_t channels = c.gdn_conv_channels(), vd = c.gdn_value_dim(), hv = c.gdn_heads_v;
    w.gdn.in_proj_qkv = load(p + "linear_attn.in_proj_qkv.weight", {channels, h});
    w.gdn.in_proj_z = load(p + "linear_attn.in_proj_z.weight", {vd, h});
    w.gdn.in_proj_b = load(p + "linear_attn.in_proj_b.weight", {hv, h});
    w.gdn.in_proj_a = load(p + "linear_attn.in_proj_a.weight", {hv, h});
    w.gdn.conv1d = load(p + "linear_attn.conv1d.weight", {channels, 1, c.conv_kernel});
    w.gdn.a_log = load(p + "linear_attn.A_log", {hv});
    w.gdn.dt_bias = load(p + "linear_attn.dt_bias", {hv});
    w.gdn.norm = load(p + "linear_attn.norm.weight", {c.gdn_d_v});
    w.gdn.out_proj = load(p + "linear_attn.out_proj.weight", {h, vd});
  }
  w.mlp.gate_proj = load(p + "mlp.gate_proj.weight", {c.intermediate_size, h});
  w.mlp.up_proj = load(p + "mlp.up_proj.weight", {c.intermediate_size, h});
  w.mlp.down_proj = load(p + "mlp.down_proj.weight", {h, c.intermediate_size});
  return w;
}

}  // namespace

Qwen35Weights load_qwen35_weights(const Checkpoint& ck, const ModelConfig& c, Device device,
                                  const LoadProgress& progress) {
  Loader load(ck, device, progress);
  const std::string& p = c.weight_prefix;
  const int64_t h = c.hidden_size;
  Qwen35Weights w;
  w.embed_tokens = load(p + "embed_tokens.weight", {c.vocab_size, h});
  for (int64_t i = 0; i < c.num_layers; ++i)
    w.layers.push_back(
        load_layer(load, c, p + "layers." + std::to_string(i) + ".", c.layer_types[i]));
  w.final_norm = load(p + "norm.weight", {h});
  if (c.tie_word_embeddings && !ck.has("lm_head.weight")) {
    w.lm_head = w.embed_tokens;
  } else {
    w.lm_head = load("lm_head.weight", {c.vocab_size, h});
  }
  if (ck.has("mtp.fc.weight")) {
    MtpWeights m;
    m.fc = load("mtp.fc.weight", {h, 2 * h});
    m.pre_fc_norm_embedding = load("mtp.pre_fc_norm_embedding.weight", {h});
    m.pre_fc_norm_hidden = load("mtp.pre_fc_norm_hidden.weight", {h});
    m.norm = load("mtp.norm.weight", {h});
    m.layer = load_layer(load, c, "mtp.layers.0.", LayerType::kFullAttention);
    w.mtp = std::move(m);
  }
  return w;
}

}  // namespace tandem
