// Name mapping and shape checks for Qwen3.5 dense checkpoints (both layouts) and mtp.* tensors.
#include "model/arch/qwen35_weights.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kernels/linear/linear.h"  // fold_rms_norm
#include "kernels/swiglu/swiglu.h"

namespace tandem {

namespace {

class Loader {
 public:
  Loader(const Checkpoint& ck, Device device, const LoadProgress& progress)
      : ck_(ck), device_(device), progress_(progress) {}

  bool folds_norms() const { return device_ == Device::kCuda; }

  Tensor operator()(const std::string& name, const Shape& shape) {
    return on_device(host(name, shape));
  }

  // Matrices [rows_i, cols] stacked by rows into one [sum rows_i, cols] tensor, in the given order;
  // with folds_norms(), the zero-centred RMSNorm `norm` [cols] is folded in.
  Tensor stacked(const std::vector<std::pair<std::string, Shape>>& parts, const std::string& norm) {
    std::vector<Tensor> h;
    int64_t rows = 0;
    for (const auto& [name, shape] : parts) {
      h.push_back(host(name, shape));
      rows += shape[0];
    }
    const bool same =
        std::all_of(h.begin(), h.end(), [&](const Tensor& t) { return t.dtype() == h[0].dtype(); });
    Tensor all = Tensor::zeros({rows, h[0].dim(1)}, same ? h[0].dtype() : DType::kF32);
    int64_t r = 0;
    for (const Tensor& t : h) {
      all.slice(0, r, r + t.dim(0)).copy_from(same ? t : t.to_f32());
      r += t.dim(0);
    }
    return on_device(folded(all, norm));
  }

  // Two matrices a, b [rows, cols] interleaved by row groups of `group`: rows [2 group i, 2 group i
  // + group) of the result are a's rows [group i, group (i + 1)), the next `group` rows b's. rows
  // must be a multiple of group.
  Tensor interleaved(const std::string& a_name, const std::string& b_name, const Shape& shape,
                     int64_t group, const std::string& norm) {
    const Tensor a = host(a_name, shape), b = host(b_name, shape);
    TANDEM_CHECK(shape[0] % group == 0,
                 "tensor '{}' (and '{}') has {} rows, which is not a multiple of {}: the fused "
                 "gate|up projection interleaves them in groups of {} rows",
                 a_name, b_name, shape[0], group, group);
    const bool same = a.dtype() == b.dtype();
    const Tensor a2 = same ? a : a.to_f32(), b2 = same ? b : b.to_f32();
    Tensor all = Tensor::zeros({2 * shape[0], shape[1]}, a2.dtype());
    for (int64_t r = 0; r < shape[0]; r += group) {
      all.slice(0, 2 * r, 2 * r + group).copy_from(a2.slice(0, r, r + group));
      all.slice(0, 2 * r + group, 2 * r + 2 * group).copy_from(b2.slice(0, r, r + group));
    }
    return on_device(folded(all, norm));
  }

 private:
  Tensor folded(Tensor host_matrix, const std::string& norm) const {
    if (folds_norms()) {
      if (host_matrix.dtype() != DType::kBF16) host_matrix = host_matrix.to_f32();
      kernels::fold_rms_norm(host_matrix, ck_.get(norm, {host_matrix.dim(1)}),
                             /*zero_centred=*/true);
    }
    return host_matrix;
  }

  Tensor host(const std::string& name, const Shape& shape) {
    Tensor host = ck_.get(name, shape);
    done_ += static_cast<size_t>(host.nbytes());
    if (progress_) progress_(done_, ck_.total_bytes());
    return host;
  }

  Tensor on_device(Tensor host) const {
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
    w.attn.qkv_proj = load.stacked({{p + "self_attn.q_proj.weight", {2 * q, h}},
                                    {p + "self_attn.k_proj.weight", {kv, h}},
                                    {p + "self_attn.v_proj.weight", {kv, h}}},
                                   p + "input_layernorm.weight");
    w.attn.o_proj = load(p + "self_attn.o_proj.weight", {h, q});
    w.attn.q_norm = load(p + "self_attn.q_norm.weight", {c.head_dim});
    w.attn.k_norm = load(p + "self_attn.k_norm.weight", {c.head_dim});
  } else {
    const int64_t channels = c.gdn_conv_channels(), vd = c.gdn_value_dim(), hv = c.gdn_heads_v;
    w.gdn.in_proj = load.stacked({{p + "linear_attn.in_proj_qkv.weight", {channels, h}},
                                  {p + "linear_attn.in_proj_z.weight", {vd, h}},
                                  {p + "linear_attn.in_proj_b.weight", {hv, h}},
                                  {p + "linear_attn.in_proj_a.weight", {hv, h}}},
                                 p + "input_layernorm.weight");
    w.gdn.conv1d = load(p + "linear_attn.conv1d.weight", {channels, 1, c.conv_kernel});
    w.gdn.a_log = load(p + "linear_attn.A_log", {hv});
    w.gdn.dt_bias = load(p + "linear_attn.dt_bias", {hv});
    w.gdn.norm = load(p + "linear_attn.norm.weight", {c.gdn_d_v});
    w.gdn.out_proj = load(p + "linear_attn.out_proj.weight", {h, vd});
  }
  w.mlp.gate_up_proj = load.interleaved(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                                        {c.intermediate_size, h}, kernels::kSwigluPairGroup,
                                        p + "post_attention_layernorm.weight");
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
  w.norms_folded = load.folds_norms();
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
