// Materialising a sequence's committed state.
#include "engine/committed_state.h"

#include "kernels/gated_delta_rule/gated_delta_rule.h"

namespace tandem {

namespace {

std::vector<float> floats(const Tensor& t) {
  const Tensor h = t.to_f32();
  return std::vector<float>(h.data<const float>(), h.data<const float>() + h.numel());
}

Tensor i32(const std::vector<int32_t>& v, Device d) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t.to(d);
}

}  // namespace

std::vector<NamedState> committed_state(const Qwen35Model& model, StatePool& pool,
                                        const SequenceCache& seq, bool with_mtp_kv) {
  const ModelConfig& c = model.config();
  const CacheViews& v = pool.views();
  const Device d = pool.device();
  const int32_t scratch = pool.scratch_slot();
  std::vector<NamedState> out;
  // Zero-row inputs of the fold-only call.
  const DType act = model.act_dtype();
  const Tensor qk = Tensor::zeros({1, c.gdn_heads_k, c.gdn_d_k}, act, d);
  const Tensor vv = Tensor::zeros({1, c.gdn_heads_v, c.gdn_d_v}, act, d);
  const Tensor ab = Tensor::zeros({1, c.gdn_heads_v}, act, d);
  const Tensor row_start = i32({0, 0}, d), slot = i32({scratch}, d);
  const Tensor n_acc = i32({seq.n_acc}, d), parity = i32({seq.parity}, d), start = i32({0}, d);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerCacheView& lv = v.layers[l];
    if (lv.ssm.raw() != nullptr) {
      lv.ssm.select(0, scratch).copy_from(lv.ssm.select(0, seq.slot));
      lv.replay.select(0, scratch).copy_from(lv.replay.select(0, seq.slot));
      const GdnWeights& g = model.weights().layers[l].gdn;
      kernels::gated_delta_rule({.q = qk,
                                 .k = qk,
                                 .v = vv,
                                 .a = ab,
                                 .b = ab,
                                 .a_log = g.a_log,
                                 .dt_bias = g.dt_bias,
                                 .state = lv.ssm,
                                 .replay = lv.replay,
                                 .out = vv,
                                 .seqs = {1, 0, row_start},
                                 .slot = slot,
                                 .n_acc = n_acc,
                                 .parity = parity,
                                 .start_position = start},
                                model.context());
      out.push_back({"ssm", l, floats(lv.ssm.select(0, scratch))});
      const Tensor hist = lv.conv_history.select(0, seq.slot).to_f32();  // [channels, hist_len]
      std::vector<float> window;
      for (int64_t ch = 0; ch < hist.dim(0); ++ch)
        for (int64_t j = 0; j < c.conv_kernel - 1; ++j)
          window.push_back(hist.data<const float>()[ch * hist.dim(1) + seq.n_acc + j]);
      out.push_back({"conv window", l, std::move(window)});
    }
  }
  auto kv = [&](const LayerCacheView& lv, const std::string& prefix, int64_t layer) {
    for (const auto& [name, cache] : {std::pair{"k", &lv.k_cache}, std::pair{"v", &lv.v_cache}}) {
      std::vector<float> values;
      const int64_t bs = cache->dim(1);
      for (int64_t p = 0; p < seq.n_past; ++p) {
        const std::vector<float> row =
            floats(cache->select(0, seq.blocks[p / bs]).select(0, p % bs));
        values.insert(values.end(), row.begin(), row.end());
      }
      out.push_back({prefix + name, layer, std::move(values)});
    }
  };
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (v.layers[l].k_cache.raw() != nullptr) kv(v.layers[l], "kv ", l);
  if (with_mtp_kv && v.mtp.k_cache.raw() != nullptr) kv(v.mtp, "mtp kv ", c.num_layers);
  return out;
}

}  // namespace tandem
