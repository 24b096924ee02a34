// Name mapping and shape checks for Qwen3.5 dense checkpoints (both layouts) and mtp.* tensors,
// and the checks of block-scaled FP8 checkpoints (every F8_E4M3 weight's `_scale_inv`).
#include "model/arch/qwen35_weights.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "kernels/linear/linear.h"  // fold_rms_norm
#include "kernels/swiglu/swiglu.h"
#include "model/fp8.h"

namespace tandem {

int64_t LinearWeight::nbytes() const {
  const auto of = [](const Tensor& t) { return t.raw() != nullptr ? t.nbytes() : 0; };
  return weight.nbytes() + of(scale_inv) + of(fold);
}

void for_each_linear(const DecoderLayerWeights& l,
                     const std::function<void(const LinearWeight&)>& f) {
  for (const StackedWeight* s : {&l.attn.qkv_proj, &l.gdn.in_proj})
    for (const LinearWeight& w : *s) f(w);
  for (const LinearWeight* w :
       {&l.attn.o_proj, &l.gdn.out_proj, &l.mlp.gate_up_proj, &l.mlp.down_proj})
    if (w->weight.raw() != nullptr) f(*w);
}

int64_t max_fp8_numel(const Qwen35Weights& w) {
  int64_t n = 0;
  const auto see = [&](const LinearWeight& l) {
    if (l.weight.dtype() == DType::kF8E4M3) n = std::max(n, l.numel());
  };
  see(w.lm_head);
  for (const DecoderLayerWeights& l : w.layers) for_each_linear(l, see);
  if (w.mtp) {
    see(w.mtp->fc);
    for_each_linear(w.mtp->layer, see);
  }
  return n;
}

namespace {

// A matrix as read from the checkpoint: FP8 ones with their scales (f32, block_rows-row blocks).
struct HostMatrix {
  Tensor w;
  Tensor scale;  // f8_e4m3 only
  bool fp8() const { return w.dtype() == DType::kF8E4M3; }
};

class Loader {
 public:
  Loader(const Checkpoint& ck, const ModelConfig& cfg, Device device, const LoadProgress& progress)
      : ck_(ck), q_(cfg.quantization), device_(device), progress_(progress) {}

  bool folds_norms() const { return device_ == Device::kCuda; }

  // A tensor that is not a linear weight (norms, conv1d, A_log, dt_bias, embeddings).
  Tensor operator()(const std::string& name, const Shape& shape) {
    Tensor t = host(name, shape);
    TANDEM_CHECK(t.dtype() != DType::kF8E4M3,
                 "checkpoint '{}': tensor '{}' is F8_E4M3, but only linear-layer weights may be "
                 "FP8 (embeddings, norms, conv1d, A_log and dt_bias stay bf16 in released FP8 "
                 "checkpoints)",
                 ck_.dir(), name);
    return on_device(t);
  }

  LinearWeight linear(const std::string& name, const Shape& shape) {
    return stacked({{name, shape}}, "")[0];
  }

  // Matrices [rows_i, cols] stacked by rows into one [sum rows_i, cols] weight, in the given order;
  // with folds_norms(), the zero-centred RMSNorm `norm` [cols] is folded in (FP8 parts carry it as
  // LinearWeight::fold instead). Runs of FP8 and of other matrices become separate parts
  // (StackedWeight).
  StackedWeight stacked(const std::vector<std::pair<std::string, Shape>>& parts,
                        const std::string& norm) {
    std::vector<HostMatrix> h;
    for (const auto& [name, shape] : parts) h.push_back(matrix(name, shape));
    StackedWeight out;
    for (size_t b = 0; b < h.size();) {
      size_t e = b + 1;
      while (e < h.size() && h[e].fp8() == h[b].fp8()) ++e;
      const std::vector<HostMatrix> run(h.begin() + b, h.begin() + e);
      out.push_back(h[b].fp8() ? fp8_on_device(stack_fp8(run), norm) : stack_plain(run, norm));
      b = e;
    }
    return out;
  }

  // Two matrices a, b [rows, cols] interleaved by row groups of `group`: rows [2 group i, 2 group i
  // + group) of the result are a's rows [group i, group (i + 1)), the next `group` rows b's. rows
  // must be a multiple of group. `norm` as in stacked().
  LinearWeight interleaved(const std::string& a_name, const std::string& b_name, const Shape& shape,
                           int64_t group, const std::string& norm) {
    const HostMatrix a = matrix(a_name, shape), b = matrix(b_name, shape);
    TANDEM_CHECK(shape[0] % group == 0,
                 "tensor '{}' (and '{}') has {} rows, which is not a multiple of {}: the fused "
                 "gate|up projection interleaves them in groups of {} rows",
                 a_name, b_name, shape[0], group, group);
    TANDEM_CHECK(a.fp8() == b.fp8(),
                 "checkpoint '{}': '{}' is {} but '{}' is {}: the fused gate|up projection needs "
                 "both FP8 or neither",
                 ck_.dir(), a_name, dtype_name(a.w.dtype()), b_name, dtype_name(b.w.dtype()));
    const bool same = a.w.dtype() == b.w.dtype();
    const Tensor a2 = same ? a.w : a.w.to_f32(), b2 = same ? b.w : b.w.to_f32();
    Tensor all = Tensor::zeros({2 * shape[0], shape[1]}, a2.dtype());
    for (int64_t r = 0; r < shape[0]; r += group) {
      all.slice(0, 2 * r, 2 * r + group).copy_from(a2.slice(0, r, r + group));
      all.slice(0, 2 * r + group, 2 * r + 2 * group).copy_from(b2.slice(0, r, r + group));
    }
    if (!a.fp8()) return {.weight = on_device(folded(all, norm))};
    // Scales regrouped to the interleave's rows (r divides group), then interleaved the same way.
    const int64_t r = std::gcd(q_.block_rows, group), per = group / r;
    const Tensor sa = fp8_scale_rows(a.scale, shape[0], q_.block_rows, r);
    const Tensor sb = fp8_scale_rows(b.scale, shape[0], q_.block_rows, r);
    Tensor s = Tensor::zeros({2 * sa.dim(0), sa.dim(1)}, DType::kF32);
    for (int64_t g = 0; g < sa.dim(0); g += per) {
      s.slice(0, 2 * g, 2 * g + per).copy_from(sa.slice(0, g, g + per));
      s.slice(0, 2 * g + per, 2 * g + 2 * per).copy_from(sb.slice(0, g, g + per));
    }
    return fp8_on_device({.weight = all, .scale_inv = s, .scale_block_rows = r}, norm);
  }

 private:
  // A linear weight and, if it is FP8, its checked scale tensor (f32).
  HostMatrix matrix(const std::string& name, const Shape& shape) {
    HostMatrix m{host(name, shape), {}};
    const std::string sname = name + "_scale_inv";
    if (!m.fp8()) {
      TANDEM_CHECK(!ck_.has(sname),
                   "checkpoint '{}': tensor '{}' is stored {} but has a scale tensor '{}' (only "
                   "F8_E4M3 weights carry scales)",
                   ck_.dir(), name, dtype_name(m.w.dtype()), sname);
      return m;
    }
    TANDEM_CHECK(q_.fp8,
                 "checkpoint '{}': tensor '{}' is F8_E4M3 but config.json has no "
                 "quantization_config (expected quant_method 'fp8', fmt 'e4m3', "
                 "weight_block_size [128, 128])",
                 ck_.dir(), name);
    // An entry names the module or a part of its dotted name ("lm_head", "linear_attn.in_proj_a",
    // "model.visual"), matched on whole components: "mlp.gate" (a MoE router) is not gate_proj.
    std::string module(".");  // ".<module>.", each entry matched as ".<entry>."
    module.append(name, 0, name.rfind(".weight"));
    module.push_back('.');
    for (const std::string& keep : q_.modules_to_not_convert) {
      std::string dotted(".");
      dotted.append(keep);
      dotted.push_back('.');
      TANDEM_CHECK(keep.empty() || module.find(dotted) == std::string::npos,
                   "checkpoint '{}': tensor '{}' is F8_E4M3 but quantization_config."
                   "modules_to_not_convert lists '{}'",
                   ck_.dir(), name, keep);
    }
    const Shape expected{(shape[0] + q_.block_rows - 1) / q_.block_rows,
                         (shape[1] + q_.block_cols - 1) / q_.block_cols};
    TANDEM_CHECK(ck_.has(sname),
                 "checkpoint '{}': FP8 weight '{}' {} has no scale tensor '{}' (f32 {}, one scale "
                 "per {}x{} block)",
                 ck_.dir(), name, shape_str(shape), sname, shape_str(expected), q_.block_rows,
                 q_.block_cols);
    const Tensor s = host(sname, {});
    TANDEM_CHECK(s.dtype() == DType::kF32 || s.dtype() == DType::kBF16 || s.dtype() == DType::kF16,
                 "checkpoint '{}': scale tensor '{}' is {}, expected f32 (or bf16/f16)", ck_.dir(),
                 sname, dtype_name(s.dtype()));
    TANDEM_CHECK(s.shape() == expected,
                 "checkpoint '{}': scale tensor '{}' has shape {}, expected {} for weight '{}' {} "
                 "in {}x{} blocks",
                 ck_.dir(), sname, shape_str(s.shape()), shape_str(expected), name,
                 shape_str(shape), q_.block_rows, q_.block_cols);
    m.scale = s.to_f32();  // bf16/f16 scales widen exactly
    return m;
  }

  // A run of non-FP8 matrices: one dtype if they agree, else f32 (exact); folded on CUDA.
  LinearWeight stack_plain(const std::vector<HostMatrix>& h, const std::string& norm) {
    if (h.size() == 1 && (norm.empty() || !folds_norms())) return {.weight = on_device(h[0].w)};
    const bool same = std::all_of(
        h.begin(), h.end(), [&](const HostMatrix& t) { return t.w.dtype() == h[0].w.dtype(); });
    Tensor all = Tensor::zeros({rows_of(h), h[0].w.dim(1)}, same ? h[0].w.dtype() : DType::kF32);
    int64_t r = 0;
    for (const HostMatrix& t : h) {
      all.slice(0, r, r + t.w.dim(0)).copy_from(same ? t.w : t.w.to_f32());
      r += t.w.dim(0);
    }
    return {.weight = on_device(norm.empty() ? all : folded(all, norm))};
  }

  // A run of FP8 matrices (host): the bytes stacked as they are, never requantised, and the scales
  // regrouped to rows of r = gcd(block rows, every part's first row), so that each group lies
  // inside one block of its own part.
  LinearWeight stack_fp8(const std::vector<HostMatrix>& h) const {
    if (h.size() == 1) return {.weight = h[0].w, .scale_inv = h[0].scale};
    int64_t r = q_.block_rows, at = 0;
    for (const HostMatrix& t : h) {
      r = std::gcd(r, at);
      at += t.w.dim(0);
    }
    Tensor all = Tensor::zeros({rows_of(h), h[0].w.dim(1)}, DType::kF8E4M3);
    Tensor s = Tensor::zeros({(all.dim(0) + r - 1) / r, h[0].scale.dim(1)}, DType::kF32);
    int64_t row = 0;
    for (const HostMatrix& t : h) {
      const int64_t n = t.w.dim(0);
      all.slice(0, row, row + n).copy_from(t.w);
      const Tensor g = fp8_scale_rows(t.scale, n, q_.block_rows, r);
      s.slice(0, row / r, row / r + g.dim(0)).copy_from(g);
      row += n;
    }
    return {.weight = all, .scale_inv = s, .scale_block_rows = r};
  }

  static int64_t rows_of(const std::vector<HostMatrix>& h) {
    int64_t rows = 0;
    for (const HostMatrix& t : h) rows += t.w.dim(0);
    return rows;
  }

  Tensor folded(Tensor host_matrix, const std::string& norm) const {
    if (folds_norms()) {
      // (host_matrix is the loader's own stacked copy: folded in place, widened only from f16.)
      if (host_matrix.dtype() != DType::kBF16 && host_matrix.dtype() != DType::kF32)
        host_matrix = host_matrix.to_f32();
      kernels::fold_rms_norm(host_matrix, ck_.get(norm, {host_matrix.dim(1)}),
                             /*zero_centred=*/true);
    }
    return host_matrix;
  }

  // The named tensor, its shape checked unless `shape` is empty.
  Tensor host(const std::string& name, const Shape& shape) {
    Tensor host = shape.empty() ? ck_.get(name) : ck_.get(name, shape);
    done_ += static_cast<size_t>(host.nbytes());
    if (progress_) progress_(done_, ck_.total_bytes());
    return host;
  }

  // An FP8 weight (host, from stack_fp8 or interleaved) on the device as it is: f8_e4m3 bytes and
  // f32 scales. With folds_norms(), the norm that a bf16 matrix would have folded in goes along as
  // LinearWeight::fold (bf16 [in]): the FP8 kernels apply it (LinearArgs::weight_fold).
  LinearWeight fp8_on_device(LinearWeight w, const std::string& norm) const {
    if (device_ == Device::kCpu) return w;
    w.weight = w.weight.to(device_);
    w.scale_inv = w.scale_inv.to(device_);
    if (folds_norms() && !norm.empty()) {
      const Tensor g = ck_.get(norm, {w.weight.dim(1)});
      // bf16 in released checkpoints; else rounded once
      w.fold = (g.dtype() == DType::kBF16 ? g : bf16_copy(g)).to(device_);
    }
    return w;
  }

  Tensor on_device(Tensor host) const {
    if (device_ == Device::kCpu) return host;
    // Matrices other than FP8 (fp8_on_device) go to the GPU as bf16; small vectors (norms, A_log,
    // dt_bias) keep their dtype.
    TANDEM_CHECK(host.dtype() != DType::kF8E4M3, "on_device: {} is FP8 (fp8_on_device)",
                 host.describe());
    if (host.ndim() >= 2 && host.dtype() != DType::kBF16) host = bf16_copy(host);
    return host.to(device_);
  }

  // A host float tensor rounded once to bf16 (in parallel: matrices of up to ~1 G elements).
  static Tensor bf16_copy(const Tensor& host) {
    const Tensor f = host.dtype() == DType::kF32 ? host : host.to_f32();
    Tensor b = Tensor::zeros(f.shape(), DType::kBF16);
    const float* src = f.data<const float>();
    bf16* dst = b.data<bf16>();
    const int64_t n = f.numel();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
    return b;
  }

  const Checkpoint& ck_;
  const QuantizationConfig& q_;
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
    w.attn.o_proj = load.linear(p + "self_attn.o_proj.weight", {h, q});
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
    w.gdn.out_proj = load.linear(p + "linear_attn.out_proj.weight", {h, vd});
  }
  w.mlp.gate_up_proj = load.interleaved(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                                        {c.intermediate_size, h}, kernels::kSwigluPairGroup,
                                        p + "post_attention_layernorm.weight");
  w.mlp.down_proj = load.linear(p + "mlp.down_proj.weight", {h, c.intermediate_size});
  return w;
}

}  // namespace

Qwen35Weights load_qwen35_weights(const Checkpoint& ck, const ModelConfig& c, Device device,
                                  const LoadProgress& progress) {
  Loader load(ck, c, device, progress);
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
    w.lm_head = {.weight = w.embed_tokens};
  } else {
    w.lm_head = load.linear("lm_head.weight", {c.vocab_size, h});
  }
  if (ck.has("mtp.fc.weight")) {
    MtpWeights m;
    m.fc = load.linear("mtp.fc.weight", {h, 2 * h});
    m.pre_fc_norm_embedding = load("mtp.pre_fc_norm_embedding.weight", {h});
    m.pre_fc_norm_hidden = load("mtp.pre_fc_norm_hidden.weight", {h});
    m.norm = load("mtp.norm.weight", {h});
    m.layer = load_layer(load, c, "mtp.layers.0.", LayerType::kFullAttention);
    w.mtp = std::move(m);
  }
  return w;
}

}  // namespace tandem
