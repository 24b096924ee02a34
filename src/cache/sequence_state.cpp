// Allocation and step-metadata writes of SequenceState.
#include "cache/sequence_state.h"

#include "kernels/attention/attention.h"

namespace tandem {

SequenceState::SequenceState(const ModelConfig& c, const StateConfig& sc, Device device, DType act,
                             bool with_mtp)
    : sc_(sc), device_(device) {
  TANDEM_CHECK(sc.k_max >= 0 && sc.k_max <= 8, "num_speculative_tokens {} outside [0, 8]",
               sc.k_max);
  TANDEM_CHECK(sc.max_step_tokens % 64 == 0 && sc.max_step_tokens >= sc.k_max + 1,
               "max_step_tokens {} must be a positive multiple of 64", sc.max_step_tokens);
  const int64_t n_blocks = (sc.max_context + sc.block_size - 1) / sc.block_size;
  auto kv_cache = [&] {
    return KvLayerCache{
        Tensor::zeros({n_blocks, sc.block_size, c.num_heads_kv, c.head_dim}, act, device),
        Tensor::zeros({n_blocks, sc.block_size, c.num_heads_kv, c.head_dim}, act, device)};
  };
  gdn.resize(c.num_layers);
  kv.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.layer_types[i] == LayerType::kFullAttention) {
      kv[i] = kv_cache();
    } else {
      gdn[i].conv_history =
          Tensor::zeros({c.gdn_conv_channels(), c.conv_kernel - 1 + sc.k_max}, act, device);
      gdn[i].ssm =
          Tensor::zeros({sc.k_max + 1, c.gdn_heads_v, c.gdn_d_k, c.gdn_d_v}, DType::kF32, device);
    }
  }
  if (with_mtp) mtp_kv = kv_cache();
  if (device == Device::kCuda) {  // sized for a verify step; longer steps loop over it
    const int64_t rows = std::min<int64_t>(sc.max_step_tokens, 16);
    attn_workspace = Tensor::zeros({kernels::attention_workspace_floats(
                                       rows, c.num_heads_q, c.head_dim, n_blocks * sc.block_size)},
                                   DType::kF32, device);
  }
  Tensor table = Tensor::zeros({n_blocks}, DType::kI32);
  for (int64_t b = 0; b < n_blocks; ++b) table.data<int32_t>()[b] = static_cast<int32_t>(b);
  block_table = table.to(device);
  n_acc = Tensor::zeros({1}, DType::kI32, device);
  for (StepMeta* m : {&target, &mtp}) {
    m->token_ids = Tensor::zeros({sc.max_step_tokens}, DType::kI32, device);
    m->positions = Tensor::zeros({sc.max_step_tokens}, DType::kI32, device);
    m->kv_len = Tensor::zeros({1}, DType::kI32, device);
  }
  set_n_acc(1);
}

void SequenceState::set_n_acc(int32_t n) {
  TANDEM_CHECK(n >= 1 && n <= sc_.k_max + 1, "n_acc {} outside [1, {}]", n, sc_.k_max + 1);
  n_acc_host_ = n;
  device_copy(n_acc.raw(), device_, &n, Device::kCpu, sizeof(n));
}

void StepMeta::plan(const int32_t* tokens, int64_t n, int64_t start, int64_t max_context) {
  TANDEM_CHECK(n >= 1 && n <= positions.dim(0), "step of {} tokens outside [1, {}]", n,
               positions.dim(0));
  TANDEM_CHECK(start + n <= max_context,
               "sequence needs {} positions but the context holds {} (raise --max-context)",
               start + n, max_context);
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(start + i);
  const int32_t len = static_cast<int32_t>(start + n);
  const Device d = positions.device();
  device_copy(token_ids.raw(), d, tokens, Device::kCpu, n * 4);
  device_copy(positions.raw(), d, pos.data(), Device::kCpu, n * 4);
  device_copy(kv_len.raw(), d, &len, Device::kCpu, 4);
}

void SequenceState::reset() {
  for (auto& g : gdn) {
    if (g.ssm.raw()) g.ssm.zero_();
    if (g.conv_history.raw()) g.conv_history.zero_();
  }
  n_past = 0;
  set_n_acc(1);
}

}  // namespace tandem
