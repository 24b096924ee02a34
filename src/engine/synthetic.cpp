// Synthetic weights: every tensor of the real layout, filled by fill_uniform on the device. A
// config with an FP8 quantization_config gets FP8 matrices on every device, quantised on the host
// from the same uniform values with the released recipe (model/fp8.h fp8_quantize: per 128x128
// block, scale = amax / 448, e4m3 round to nearest even); what released checkpoints keep in bf16
// stays bf16 (docs/fp8.md). On CUDA the random matrices stand for folded ones (norms_folded), and
// FP8 ones carry the model's own norm as LinearWeight::fold, as the loader's do.
#include "engine/synthetic.h"

#include <algorithm>
#include <cmath>

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
  // A linear weight, std ~0.02. FP8: `fold` is the norm that the forward expects folded into it
  // (CUDA; empty when nothing is folded), kept as LinearWeight::fold.
  LinearWeight matrix(const Shape& shape, const Tensor& fold = {}) {
    if (!fp8_) return {.weight = (*this)(shape, lo_, hi_)};
    // fill_uniform's values on the host, filled and quantised in parallel (the 27B shape has 27 G
    // FP8 elements), one f32 matrix at a time in one reused buffer (the largest matrix, 0.7 GB on
    // the 27B shape; a fresh one per matrix would zero 108 GB): the same FP8 matrices on every
    // device.
    const int64_t n = shape[0] * shape[1];
    if (f32_.numel() < n) {
      f32_ = Tensor();  // freed before the larger one is allocated
      f32_ = Tensor::zeros({n}, DType::kF32);
    }
    const Tensor f = f32_.slice(0, 0, n).reshape(shape);
    float* v = f.data<float>();
    const uint64_t seed = seed_++;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) v[i] = hash_uniform(seed, static_cast<uint64_t>(i), lo_, hi_);
    Fp8Matrix q = fp8_quantize(f);
    if (device_ == Device::kCpu) return {.weight = q.w, .scale_inv = q.scale, .fold = fold};
    return {.weight = q.w.to(device_), .scale_inv = q.scale.to(device_), .fold = fold};
  }

 private:
  static constexpr float lo_ = -0.035f, hi_ = 0.035f;

  Device device_;
  uint64_t seed_;
  bool fp8_;
  Tensor f32_;  // host f32 [n]: the values of the FP8 matrix being made
};

// `folds`: the norms count as folded into the input projections (CUDA).
DecoderLayerWeights layer(Maker& m, const ModelConfig& c, LayerType type, bool folds) {
  const int64_t h = c.hidden_size;
  DecoderLayerWeights w;
  w.type = type;
  w.input_norm = m({h}, -0.1f, 0.1f);
  w.post_attention_norm = m({h}, -0.1f, 0.1f);
  const Tensor in_fold = folds ? w.input_norm : Tensor();
  const Tensor mlp_fold = folds ? w.post_attention_norm : Tensor();
  if (type == LayerType::kFullAttention) {
    const int64_t q = c.num_heads_q * c.head_dim, kv = c.num_heads_kv * c.head_dim;
    w.attn.qkv_proj = {m.matrix({2 * q + 2 * kv, h}, in_fold)};
    w.attn.o_proj = m.matrix({h, q});
    w.attn.q_norm = m({c.head_dim}, -0.1f, 0.1f);
    w.attn.k_norm = m({c.head_dim}, -0.1f, 0.1f);
  } else {
    const int64_t ch = c.gdn_conv_channels(), vd = c.gdn_value_dim(), hv = c.gdn_heads_v;
    if (m.fp8()) {  // qkv|z FP8, b|a bf16 (as released FP8 checkpoints keep them): two parts
      w.gdn.in_proj = {m.matrix({ch + vd, h}, in_fold),
                       {.weight = m({2 * hv, h}, -0.035f, 0.035f)}};
    } else {
      w.gdn.in_proj = {m.matrix({ch + vd + 2 * hv, h})};
    }
    w.gdn.conv1d = m({ch, 1, c.conv_kernel}, -0.5f, 0.5f);
    w.gdn.a_log = m({hv}, 0.f, 2.7f, DType::kF32);  // A in [1, 15]
    w.gdn.dt_bias = m({hv}, -1.f, 1.f, DType::kF32);
    w.gdn.norm = m({c.gdn_d_v}, 0.9f, 1.1f);
    w.gdn.out_proj = m.matrix({h, vd});
  }
  // random values: any row order will do (swiglu.h's pair layout included)
  w.mlp.gate_up_proj = m.matrix({2 * c.intermediate_size, h}, mlp_fold);
  w.mlp.down_proj = m.matrix({h, c.intermediate_size});
  return w;
}

// The bytes (or, with params, the elements) of every tensor of a layer.
int64_t layer_size(const DecoderLayerWeights& w, bool params) {
  auto of = [&](const Tensor& t) { return t.raw() ? (params ? t.numel() : t.nbytes()) : 0; };
  int64_t b = of(w.input_norm) + of(w.post_attention_norm);
  for (const Tensor* t :
       {&w.attn.q_norm, &w.attn.k_norm, &w.gdn.conv1d, &w.gdn.a_log, &w.gdn.dt_bias, &w.gdn.norm})
    b += of(*t);
  for_each_linear(w, [&](const LinearWeight& l) { b += params ? l.numel() : l.nbytes(); });
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
  Maker m(device, seed, c.quantization.fp8);
  const int64_t h = c.hidden_size;
  Qwen35Weights w;
  // Random projections stand for folded ones as well as for plain ones: the CUDA forward takes
  // the folded path it takes with a real checkpoint (qwen35_weights.h); FP8 ones, which cannot
  // hold a norm, carry it (Maker::matrix).
  w.norms_folded = device == Device::kCuda;
  const bool folds = w.norms_folded;
  w.embed_tokens = m({c.vocab_size, h}, -0.1f, 0.1f);
  for (int64_t i = 0; i < c.num_layers; ++i)
    w.layers.push_back(layer(m, c, c.layer_types[i], folds));
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
    mtp.layer = layer(m, c, LayerType::kFullAttention, folds);
    w.mtp = std::move(mtp);
  }
  device_synchronize(device);
  return w;
}

int64_t weight_bytes_per_step(const Qwen35Weights& w) { return step_size(w, false); }

int64_t weight_params_per_step(const Qwen35Weights& w) { return step_size(w, true); }

}  // namespace tandem
