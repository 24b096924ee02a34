// Synthetic weights: every tensor of the real layout, filled by fill_uniform on the device.
#include "engine/synthetic.h"

#include "core/cuda_graph.h"

namespace tandem {

namespace {

class Maker {
 public:
  Maker(Device d, uint64_t seed) : device_(d), seed_(seed) {}
  Tensor operator()(const Shape& shape, float lo, float hi, DType dt = DType::kBF16) {
    Tensor t = Tensor::zeros(shape, dt, device_);
    fill_uniform(t, seed_++, lo, hi);
    return t;
  }
  Tensor matrix(const Shape& shape) { return (*this)(shape, -0.035f, 0.035f); }  // std ~0.02

 private:
  Device device_;
  uint64_t seed_;
};

DecoderLayerWeights layer(Maker& m, const ModelConfig& c, LayerType type) {
  const int64_t h = c.hidden_size;
  DecoderLayerWeights w;
  w.type = type;
  w.input_norm = m({h}, -0.1f, 0.1f);
  w.post_attention_norm = m({h}, -0.1f, 0.1f);
  if (type == LayerType::kFullAttention) {
    const int64_t q = c.num_heads_q * c.head_dim, kv = c.num_heads_kv * c.head_dim;
    w.attn.qkv_proj = m.matrix({2 * q + 2 * kv, h});
    w.attn.o_proj = m.matrix({h, q});
    w.attn.q_norm = m({c.head_dim}, -0.1f, 0.1f);
    w.attn.k_norm = m({c.head_dim}, -0.1f, 0.1f);
  } else {
    const int64_t ch = c.gdn_conv_channels(), vd = c.gdn_value_dim(), hv = c.gdn_heads_v;
    w.gdn.in_proj = m.matrix({ch + vd + 2 * hv, h});
    w.gdn.conv1d = m({ch, 1, c.conv_kernel}, -0.5f, 0.5f);
    w.gdn.a_log = m({hv}, 0.f, 2.7f, DType::kF32);  // A in [1, 15]
    w.gdn.dt_bias = m({hv}, -1.f, 1.f, DType::kF32);
    w.gdn.norm = m({c.gdn_d_v}, 0.9f, 1.1f);
    w.gdn.out_proj = m.matrix({h, vd});
  }
  w.mlp.gate_up_proj = m.matrix({2 * c.intermediate_size, h});  // random: any row order will do
  w.mlp.down_proj = m.matrix({h, c.intermediate_size});
  return w;
}

int64_t layer_bytes(const DecoderLayerWeights& w) {
  int64_t b = w.input_norm.nbytes() + w.post_attention_norm.nbytes();
  for (const Tensor* t : {&w.attn.qkv_proj, &w.attn.o_proj, &w.attn.q_norm, &w.attn.k_norm,
                          &w.gdn.in_proj, &w.gdn.conv1d, &w.gdn.a_log, &w.gdn.dt_bias, &w.gdn.norm,
                          &w.gdn.out_proj, &w.mlp.gate_up_proj, &w.mlp.down_proj})
    if (t->raw()) b += t->nbytes();
  return b;
}

}  // namespace

Qwen35Weights synthetic_qwen35_weights(const ModelConfig& c, Device device, uint64_t seed,
                                       bool with_mtp) {
  Maker m(device, seed);
  const int64_t h = c.hidden_size;
  Qwen35Weights w;
  // Random projections stand for folded ones as well as for plain ones: the CUDA forward takes
  // the folded path it takes with a real checkpoint (qwen35_weights.h).
  w.norms_folded = device == Device::kCuda;
  w.embed_tokens = m({c.vocab_size, h}, -0.1f, 0.1f);
  for (int64_t i = 0; i < c.num_layers; ++i) w.layers.push_back(layer(m, c, c.layer_types[i]));
  w.final_norm = m({h}, -0.1f, 0.1f);
  w.lm_head = c.tie_word_embeddings ? w.embed_tokens : m.matrix({c.vocab_size, h});
  if (with_mtp) {
    MtpWeights mtp;
    mtp.fc = m.matrix({h, 2 * h});
    mtp.pre_fc_norm_embedding = m({h}, -0.1f, 0.1f);
    mtp.pre_fc_norm_hidden = m({h}, -0.1f, 0.1f);
    mtp.norm = m({h}, -0.1f, 0.1f);
    mtp.layer = layer(m, c, LayerType::kFullAttention);
    w.mtp = std::move(mtp);
  }
  device_synchronize(device);
  return w;
}

int64_t weight_bytes_per_step(const Qwen35Weights& w) {
  int64_t b =
      w.final_norm.nbytes() + w.lm_head.nbytes() + w.embed_tokens.nbytes() / w.embed_tokens.dim(0);
  for (const auto& l : w.layers) b += layer_bytes(l);
  return b;
}

}  // namespace tandem
