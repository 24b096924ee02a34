// Synthetic weights: every tensor of the real layout, filled by fill_uniform on the device. A
// config with an FP8 quantization_config gets FP8 matrices on the CPU, quantised from the same
// uniform values with the released recipe (per 128x128 block, scale = amax / 448, e4m3 round to
// nearest even); on CUDA, bf16 ones, as the loader dequantises FP8 there (docs/fp8.md).
#include "engine/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/cuda_graph.h"
#include "model/fp8.h"

namespace tandem {

namespace {

class Maker {
 public:
  Maker(Device d, uint64_t seed, bool fp8) : device_(d), seed_(seed), fp8_(fp8) {}
  Tensor operator()(const Shape& shape, float lo, float hi, DType dt = DType::kBF16) {
    Tensor t = Tensor::zeros(shape, dt, device_);
    fill_uniform(t, seed_++, lo, hi);
    return t;
  }
  bool fp8() const { return fp8_; }
  LinearWeight matrix(const Shape& shape) {  // std ~0.02
    if (!fp8_) return {.weight = (*this)(shape, -0.035f, 0.035f)};
    return quantized((*this)(shape, -0.035f, 0.035f, DType::kF32));
  }

 private:
  static LinearWeight quantized(const Tensor& f) {
    Fp8Matrix q = fp8_quantize(f);
    return {.weight = std::move(q.w), .scale_inv = std::move(q.scale)};
  }

  Device device_;
  uint64_t seed_;
  bool fp8_;
};

DecoderLayerWeights layer(Maker& m, const ModelConfig& c, LayerType type) {
  const int64_t h = c.hidden_size;
  DecoderLayerWeights w;
  w.type = type;
  w.input_norm = m({h}, -0.1f, 0.1f);
  w.post_attention_norm = m({h}, -0.1f, 0.1f);
  if (type == LayerType::kFullAttention) {
    const int64_t q = c.num_heads_q * c.head_dim, kv = c.num_heads_kv * c.head_dim;
    w.attn.qkv_proj = {m.matrix({2 * q + 2 * kv, h})};
    w.attn.o_proj = m.matrix({h, q});
    w.attn.q_norm = m({c.head_dim}, -0.1f, 0.1f);
    w.attn.k_norm = m({c.head_dim}, -0.1f, 0.1f);
  } else {
    const int64_t ch = c.gdn_conv_channels(), vd = c.gdn_value_dim(), hv = c.gdn_heads_v;
    if (m.fp8()) {  // qkv|z FP8, b|a bf16 (as released FP8 checkpoints keep them): two parts
      w.gdn.in_proj = {m.matrix({ch + vd, h}), {.weight = m({2 * hv, h}, -0.035f, 0.035f)}};
    } else {
      w.gdn.in_proj = {m.matrix({ch + vd + 2 * hv, h})};
    }
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

// The bytes (or, with params, the elements) of every tensor of a layer.
int64_t layer_size(const DecoderLayerWeights& w, bool params) {
  auto of = [&](const Tensor& t) { return t.raw() ? (params ? t.numel() : t.nbytes()) : 0; };
  auto lin = [&](const LinearWeight& l) {
    return l.weight.raw() ? (params ? l.numel() : l.nbytes()) : 0;
  };
  int64_t b = of(w.input_norm) + of(w.post_attention_norm);
  for (const Tensor* t :
       {&w.attn.q_norm, &w.attn.k_norm, &w.gdn.conv1d, &w.gdn.a_log, &w.gdn.dt_bias, &w.gdn.norm})
    b += of(*t);
  for (const StackedWeight* s : {&w.attn.qkv_proj, &w.gdn.in_proj})
    for (const LinearWeight& l : *s) b += lin(l);
  for (const LinearWeight* l :
       {&w.attn.o_proj, &w.gdn.out_proj, &w.mlp.gate_up_proj, &w.mlp.down_proj})
    b += lin(*l);
  return b;
}

int64_t step_size(const Qwen35Weights& w, bool params) {
  const int64_t row =
      params ? w.embed_tokens.dim(1) : w.embed_tokens.nbytes() / w.embed_tokens.dim(0);
  int64_t b = (params ? w.final_norm.numel() + w.lm_head.numel()
                      : w.final_norm.nbytes() + w.lm_head.nbytes()) +
              row;
  for (const auto& l : w.layers) b += layer_size(l, params);
  return b;
}

}  // namespace

Qwen35Weights synthetic_qwen35_weights(const ModelConfig& c, Device device, uint64_t seed,
                                       bool with_mtp) {
  const bool fp8 = c.quantization.fp8 && device == Device::kCpu;
  if (c.quantization.fp8 && device != Device::kCpu)
    std::fprintf(stderr,
                 "fp8: CUDA FP8 kernels are not built yet: synthetic weights are bf16 (bf16 "
                 "memory and speed)\n");
  Maker m(device, seed, fp8);
  const int64_t h = c.hidden_size;
  Qwen35Weights w;
  // Random projections stand for folded ones as well as for plain ones: the CUDA forward takes
  // the folded path it takes with a real checkpoint (qwen35_weights.h).
  w.norms_folded = device == Device::kCuda;
  w.embed_tokens = m({c.vocab_size, h}, -0.1f, 0.1f);
  for (int64_t i = 0; i < c.num_layers; ++i) w.layers.push_back(layer(m, c, c.layer_types[i]));
  w.final_norm = m({h}, -0.1f, 0.1f);
  // lm_head stays bf16 in released FP8 checkpoints
  w.lm_head = {.weight =
                   c.tie_word_embeddings ? w.embed_tokens : m({c.vocab_size, h}, -0.035f, 0.035f)};
  if (with_mtp) {
    MtpWeights mtp;
    mtp.fc = {.weight = m({h, 2 * h}, -0.035f, 0.035f)};  // bf16, as in released FP8 checkpoints
    mtp.pre_fc_norm_embedding = m({h}, -0.1f, 0.1f);
    mtp.pre_fc_norm_hidden = m({h}, -0.1f, 0.1f);
    mtp.norm = m({h}, -0.1f, 0.1f);
    mtp.layer = layer(m, c, LayerType::kFullAttention);
    w.mtp = std::move(mtp);
  }
  device_synchronize(device);
  return w;
}

int64_t weight_bytes_per_step(const Qwen35Weights& w) { return step_size(w, false); }

int64_t weight_params_per_step(const Qwen35Weights& w) { return step_size(w, true); }

}  // namespace tandem
