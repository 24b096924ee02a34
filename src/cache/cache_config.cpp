// Pool sizing and its start-up description.
#include "cache/cache_config.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"

namespace tandem {

int64_t kv_block_bytes(const ModelConfig& m, const CacheConfig& c, DType act) {
  const int64_t layers = m.num_attention_layers() + (c.with_mtp ? 1 : 0);
  return 2 * layers * c.block_size * m.num_heads_kv * m.head_dim * dtype_size(act);
}

int64_t gdn_slot_bytes(const ModelConfig& m, const CacheConfig& c, DType act) {
  const int64_t state = m.gdn_heads_v * m.gdn_d_k * m.gdn_d_v * 4;
  const int64_t conv = m.gdn_conv_channels() * (m.conv_kernel - 1 + c.step_rows) * dtype_size(act);
  const int64_t replay =
      2 * c.step_rows *
      kernels::gdr_replay_width(m.gdn_heads_k, m.gdn_d_k, m.gdn_heads_v, m.gdn_d_v) *
      dtype_size(act);
  return m.num_gdn_layers() * (state + conv + replay);
}

CacheConfig fit_cache_to_budget(const ModelConfig& m, CacheConfig c, DType act,
                                int64_t budget_bytes) {
  TANDEM_CHECK(c.num_slots >= 1, "--max-num-seqs must be at least 1, got {}", c.num_slots);
  const int64_t slots = (c.num_slots + 1) * gdn_slot_bytes(m, c, act);
  const int64_t block = kv_block_bytes(m, c, act);
  const int64_t blocks = block > 0 ? (budget_bytes - slots) / block - 1 : c.max_blocks_per_seq();
  TANDEM_CHECK(blocks >= c.max_blocks_per_seq(),
               "the cache budget of {:.2f} GiB holds {} sequence slots ({:.2f} GiB) but not the "
               "{} KV blocks of one {}-token sequence; lower --max-num-seqs or --max-model-len, or "
               "raise --gpu-memory-utilization",
               budget_bytes / 1073741824.0, c.num_slots, slots / 1073741824.0,
               c.max_blocks_per_seq(), c.max_model_len);
  c.num_blocks = blocks;
  return c;
}

std::string describe_cache(const ModelConfig& m, const CacheConfig& c, DType act) {
  const double gib = 1073741824.0;
  const int64_t block = kv_block_bytes(m, c, act), slot = gdn_slot_bytes(m, c, act);
  auto fit = [&](int64_t len) {
    const int64_t per_seq = (len + c.block_size - 1) / c.block_size;
    return std::min(c.num_slots, per_seq > 0 ? c.num_blocks / per_seq : c.num_slots);
  };
  std::string s = fmt::format(
      "cache: {} KV blocks of {} positions ({:.2f} GiB, {:.1f} KiB per position), {} GDN slots "
      "({:.2f} GiB, {:.1f} MiB per sequence, {} rows per step)",
      c.num_blocks, c.block_size, (c.num_blocks + 1) * block / gib, block / 1024.0 / c.block_size,
      c.num_slots, (c.num_slots + 1) * slot / gib, slot / 1048576.0, c.step_rows);
  s += fmt::format("\ncache: fits {} sequences of {} tokens (--max-model-len)",
                   fit(c.max_model_len), c.max_model_len);
  for (int64_t len : {int64_t{1024}, int64_t{32768}})
    s += fmt::format(", {} of {} tokens", fit(len), len);
  return s;
}

}  // namespace tandem
