// Pool allocation, free lists, slot zeroing and swapping.
#include "cache/state_pool.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/attention/attention.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"

namespace tandem {

StatePool::StatePool(const ModelConfig& m, const CacheConfig& c, const ExecContext& ctx, DType act,
                     int64_t attn_workspace_rows)
    : m_(m), c_(c), ctx_(ctx), act_(act) {
  TANDEM_CHECK(c.num_blocks >= 1 && c.num_slots >= 1 && c.step_rows >= 1 && c.block_size >= 1,
               "state pool: {} blocks, {} slots, {} step rows, block size {}", c.num_blocks,
               c.num_slots, c.step_rows, c.block_size);
  const Device d = ctx.device;
  const int64_t blocks = c.num_blocks + 1, slots = c.num_slots + 1;
  auto kv_layer = [&] {
    LayerCacheView v;
    v.k_cache = Tensor::zeros({blocks, c.block_size, m.num_heads_kv, m.head_dim}, act, d);
    v.v_cache = Tensor::zeros({blocks, c.block_size, m.num_heads_kv, m.head_dim}, act, d);
    return v;
  };
  views_.layers.resize(m.num_layers);
  const int64_t width =
      kernels::gdr_replay_width(m.gdn_heads_k, m.gdn_d_k, m.gdn_heads_v, m.gdn_d_v);
  for (int64_t l = 0; l < m.num_layers; ++l) {
    LayerCacheView& v = views_.layers[l];
    if (m.layer_types[l] == LayerType::kFullAttention) {
      v = kv_layer();
    } else {
      v.ssm = Tensor::zeros({slots, m.gdn_heads_v, m.gdn_d_k, m.gdn_d_v}, DType::kF32, d);
      v.conv_history =
          Tensor::zeros({slots, m.gdn_conv_channels(), m.conv_kernel - 1 + c.step_rows}, act, d);
      v.replay = Tensor::zeros({slots, 2, c.step_rows, width}, act, d);
    }
  }
  if (c.with_mtp) views_.mtp = kv_layer();
  if (d == Device::kCuda) {
    views_.attn_workspace = Tensor::zeros(
        {kernels::attention_workspace_floats(attn_workspace_rows, m.num_heads_q, m.head_dim,
                                             c.table_width() * c.block_size)},
        DType::kF32, d);
  }
  for (int64_t b = c.num_blocks - 1; b >= 0; --b) free_blocks_.push_back(static_cast<int32_t>(b));
  for (int64_t s = c.num_slots - 1; s >= 0; --s) free_slots_.push_back(static_cast<int32_t>(s));
}

void StatePool::zero_slot(int32_t slot) {
  for (const LayerCacheView& v : views_.layers) {
    if (v.ssm.raw() == nullptr) continue;
    v.ssm.select(0, slot).zero_();
    v.conv_history.select(0, slot).zero_();
  }
}

bool StatePool::acquire(SequenceCache& seq) {
  TANDEM_CHECK(!seq.resident(), "state pool: the sequence already holds slot {}", seq.slot);
  if (free_slots_.empty()) return false;
  seq.slot = free_slots_.back();
  free_slots_.pop_back();
  zero_slot(seq.slot);
  seq.blocks.clear();
  seq.n_past = 0;
  seq.n_acc = 0;
  seq.parity = 0;
  return true;
}

bool StatePool::reserve(SequenceCache& seq, int64_t positions) {
  TANDEM_CHECK(positions <= c_.max_model_len,
               "state pool: {} positions exceed the max model length {}", positions,
               c_.max_model_len);
  const int64_t need = blocks_for(positions) - static_cast<int64_t>(seq.blocks.size());
  if (need <= 0) return true;
  if (need > free_blocks()) return false;
  for (int64_t i = 0; i < need; ++i) {
    seq.blocks.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  return true;
}

void StatePool::release(SequenceCache& seq) {
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) free_blocks_.push_back(*it);
  seq.blocks.clear();
  if (seq.slot >= 0) free_slots_.push_back(seq.slot);
  seq.slot = -1;
}

std::vector<std::pair<Tensor, bool>> StatePool::pool_tensors() const {
  std::vector<std::pair<Tensor, bool>> out;
  auto add_layer = [&](const LayerCacheView& v) {
    for (const Tensor* t : {&v.k_cache, &v.v_cache}) {
      if (t->raw()) out.emplace_back(*t, false);
    }
    for (const Tensor* t : {&v.ssm, &v.conv_history, &v.replay}) {
      if (t->raw()) out.emplace_back(*t, true);
    }
  };
  for (const LayerCacheView& v : views_.layers) add_layer(v);
  add_layer(views_.mtp);
  return out;
}

SwappedState StatePool::snapshot(const SequenceCache& seq, int64_t positions) const {
  TANDEM_CHECK(seq.resident(), "state pool: a copy of a sequence that holds no slot");
  SwappedState s;
  s.n_blocks = std::min(blocks_for(positions), static_cast<int64_t>(seq.blocks.size()));
  for (const auto& [t, by_slot] : pool_tensors()) {
    if (by_slot) {
      const Tensor src = t.select(0, seq.slot);
      Tensor host = Tensor::zeros(src.shape(), src.dtype());
      host.copy_from(src);
      s.layers.push_back(std::move(host));
    } else {
      Shape shape = t.shape();
      shape[0] = s.n_blocks;
      Tensor host = Tensor::zeros(shape, t.dtype());
      for (int64_t i = 0; i < s.n_blocks; ++i)
        host.select(0, i).copy_from(t.select(0, seq.blocks[static_cast<size_t>(i)]));
      s.layers.push_back(std::move(host));
    }
  }
  return s;
}

SwappedState StatePool::swap_out(SequenceCache& seq) {
  SwappedState s = snapshot(seq, static_cast<int64_t>(seq.blocks.size()) * c_.block_size);
  release(seq);
  return s;
}

bool StatePool::swap_in(SequenceCache& seq, const SwappedState& s) {
  TANDEM_CHECK(!seq.resident(), "state pool: swap_in of a resident sequence");
  if (free_slots_.empty() || free_blocks() < s.n_blocks) return false;
  seq.slot = free_slots_.back();
  free_slots_.pop_back();
  for (int64_t i = 0; i < s.n_blocks; ++i) {
    seq.blocks.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  const auto tensors = pool_tensors();
  TANDEM_CHECK(tensors.size() == s.layers.size(),
               "state pool: swapped state of {} tensors, pool {}", s.layers.size(), tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const auto& [t, by_slot] = tensors[k];
    if (by_slot) {
      t.select(0, seq.slot).copy_from(s.layers[k]);
    } else {
      for (int64_t i = 0; i < s.n_blocks; ++i)
        t.select(0, seq.blocks[i]).copy_from(s.layers[k].select(0, i));
    }
  }
  return true;
}

}  // namespace tandem
