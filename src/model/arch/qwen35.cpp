// Qwen3.5 dense forward (reference section 1): pre-norm decoder blocks, GDN and gated-attention
// mixers, SwiGLU MLP, final norm, lm_head; and the MTP block (section 2). Only kernel interfaces
// are called, so this file is device-neutral. Two ways of carrying the residual stream:
//  - plain (CPU): each norm also adds the pending mixer/MLP output (s.mixed) into s.residual and
//    writes s.normed, which the next projection reads;
//  - norms folded into the weights (CUDA, qwen35_weights.h): the output projections add into
//    s.residual themselves (LinearEpilogue::kAddToOut) and the input projections read s.residual,
//    scaled by its inverse RMS (LinearArgs::input_rms; FP8 matrices bring the norm itself as
//    LinearArgs::weight_fold); only the final norms remain.
#include "model/arch/qwen35.h"

#include "core/cuda_graph.h"
#include "kernels/argmax/argmax.h"
#include "kernels/attention/attention.h"
#include "kernels/attention_inputs/attention_inputs.h"
#include "kernels/conv1d/conv1d.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/linear/linear.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/swiglu/swiglu.h"  // kSwigluPairGroup: the gate|up layout

namespace tandem {

namespace k = kernels;

// Activations for up to max_step_rows rows, allocated once (no allocation during a step).
struct ForwardScratch {
  Tensor residual, mixed, normed, hidden;  // [T, hidden]
  // Outputs of the stacked projections (qwen35_weights.h); the parts below are column views.
  Tensor gdn_in;                       // [T, channels | vd | n_heads_v | n_heads_v]
  Tensor attn_in;                      // [T, 2 Nq D | Nkv D | Nkv D]
  Tensor gate_up;                      // [T, 2 inter] pair layout (swiglu.h), if not fused
  Tensor mlp_act;                      // [T, inter] = silu(gate) * up
  Tensor qkv, z, beta_raw, decay_raw;  // views of gdn_in
  Tensor q_gate, k, v;                 // views of attn_in
  Tensor conv_out;                     // [T, channels]
  Tensor gdn_out, gdn_normed;          // [T, vd]
  Tensor attn_out;                     // [T, Nq D]
  Tensor mtp_in;                       // [T, 2 hidden]
  Tensor logit_hidden;                 // [T, hidden]: the rows whose logits a step computes

  ForwardScratch(const ModelConfig& c, int64_t t, DType act, Device d) {
    auto z2 = [&](int64_t cols) { return Tensor::zeros({t, cols}, act, d); };
    const int64_t ch = c.gdn_conv_channels(), vd = c.gdn_value_dim(), hv = c.gdn_heads_v;
    const int64_t q2 = 2 * c.num_heads_q * c.head_dim, kv = c.num_heads_kv * c.head_dim;
    const int64_t inter = c.intermediate_size;
    residual = z2(c.hidden_size);
    mixed = z2(c.hidden_size);
    normed = z2(c.hidden_size);
    hidden = z2(c.hidden_size);
    gdn_in = z2(ch + vd + 2 * hv);
    qkv = gdn_in.slice(1, 0, ch);
    z = gdn_in.slice(1, ch, ch + vd);
    beta_raw = gdn_in.slice(1, ch + vd, ch + vd + hv);
    decay_raw = gdn_in.slice(1, ch + vd + hv, ch + vd + 2 * hv);
    attn_in = z2(q2 + 2 * kv);
    q_gate = attn_in.slice(1, 0, q2);
    k = attn_in.slice(1, q2, q2 + kv);
    v = attn_in.slice(1, q2 + kv, q2 + 2 * kv);
    gate_up = z2(2 * inter);
    mlp_act = z2(inter);
    conv_out = z2(ch);
    gdn_out = z2(vd);
    gdn_normed = z2(vd);
    attn_out = z2(c.num_heads_q * c.head_dim);
    mtp_in = z2(2 * c.hidden_size);
    logit_hidden = z2(c.hidden_size);
  }
};

namespace {
Tensor rows(const Tensor& t, int64_t n) { return t.slice(0, 0, n); }

// The weight fields of a linear call (FP8 weights bring their block scales and, on CUDA, the norm
// they could not fold in). Every linear of the forward is built here.
k::LinearArgs with_weight(k::LinearArgs a, const LinearWeight& w) {
  a.weight = w.weight;
  a.weight_scale_inv = w.scale_inv;
  a.scale_block_rows = w.scale_block_rows;
  a.weight_fold = w.fold;
  TANDEM_CHECK(w.fold.raw() == nullptr || a.input_rms,
               "linear: weight {} carries a folded norm but is not called with input_rms",
               w.weight.describe());
  return a;
}

}  // namespace

k::LinearArgs Qwen35Model::from_norm(const LinearWeight& weight, const Tensor& out,
                                     const StepBatch& b) const {
  const ForwardScratch& s = *s_;
  const int64_t n = b.n_rows;
  if (w_.norms_folded) {
    return with_weight({.x = rows(s.residual, n),
                        .out = out,
                        .input_rms = true,
                        .input_rms_eps = cfg_.rms_norm_eps,
                        .input_scratch = rows(s.normed, n),
                        .decode_rows = b.decode_rows},
                       weight);
  }
  return with_weight({.x = rows(s.normed, n), .out = out, .decode_rows = b.decode_rows}, weight);
}

void Qwen35Model::project(const StackedWeight& weight, const Tensor& out, const StepBatch& b) {
  int64_t col = 0;  // each part computes its own columns of out
  for (const LinearWeight& part : weight) {
    k::linear(from_norm(part, out.slice(1, col, col + part.out()), b), ctx_);
    col += part.out();
  }
  TANDEM_CHECK(col == out.dim(1), "project: parts of {} rows for an output {}", col,
               out.describe());
}

k::LinearArgs Qwen35Model::to_residual(const Tensor& x, const LinearWeight& weight,
                                       const StepBatch& b) const {
  const ForwardScratch& s = *s_;
  const int64_t n = b.n_rows;
  if (w_.norms_folded) {
    return with_weight({.x = x,
                        .out = rows(s.residual, n),
                        .epilogue = k::LinearEpilogue::kAddToOut,
                        .scratch = rows(s.mixed, n),
                        .decode_rows = b.decode_rows},
                       weight);
  }
  return with_weight({.x = x, .out = rows(s.mixed, n), .decode_rows = b.decode_rows}, weight);
}

// The last norm of a stack of blocks (final_norm, mtp.norm) into out: the pending residual add
// happens here on the plain path.
void Qwen35Model::final_norm(const Tensor& weight, const Tensor& out, int64_t n) {
  ForwardScratch& s = *s_;
  const bool folded = w_.norms_folded;
  k::rms_norm({.x = rows(folded ? s.residual : s.mixed, n),
               .weight = weight,
               .out = out,
               .residual = folded ? Tensor() : rows(s.residual, n),
               .eps = cfg_.rms_norm_eps},
              ctx_);
}

void Qwen35Model::logits_of(const StepBatch& b, const Tensor& hidden, const Tensor& logits,
                            const LinearWeight& head) {
  if (logits.raw() == nullptr || b.n_logit_rows == 0) return;
  TANDEM_CHECK(logits.dim(0) == b.n_logit_rows, "forward: logits {} for {} logit rows",
               logits.describe(), b.n_logit_rows);
  Tensor x = hidden;
  if (!b.logits_all_rows) {  // gather the rows: an embedding lookup with the hidden rows as table
    x = rows(s_->logit_hidden, b.n_logit_rows);
    k::embedding({.ids = b.logit_rows, .table = hidden, .out = x}, ctx_);
  }
  const int64_t decode_logit_rows = b.logits_all_rows ? b.decode_rows : b.n_decode_logit_rows;
  k::linear(with_weight({.x = x, .out = logits, .decode_rows = decode_logit_rows}, head), ctx_);
  observe("logits", -1, logits);
}

Qwen35Model::Qwen35Model(ModelConfig cfg, Qwen35Weights weights, const ExecContext& ctx,
                         int64_t max_step_rows)
    : cfg_(std::move(cfg)),
      w_(std::move(weights)),
      ctx_(ctx),
      act_(ctx.device == Device::kCpu ? DType::kF32 : DType::kBF16),
      s_(std::make_unique<ForwardScratch>(cfg_, max_step_rows, act_, ctx.device)) {
  // Unsupported (op, dtype, device, shape) is an error at load time (DESIGN.md invariant 6).
  // The loader checks this too, naming the tensor; synthetic weights are only checked here.
  TANDEM_CHECK(cfg_.intermediate_size % k::kSwigluPairGroup == 0,
               "op linear.swiglu (mlp gate|up), device {}: intermediate_size {} is not a multiple "
               "of {}",
               device_name(ctx_.device), cfg_.intermediate_size, k::kSwigluPairGroup);
#ifdef TANDEM_CUDA
  if (ctx_.device == Device::kCuda) {
    TANDEM_CHECK(
        k::attention_cuda_supports(cfg_.head_dim),
        "op attention, dtype bf16, device cuda: head_dim {} is not supported (64, 128, 256)",
        cfg_.head_dim);
    TANDEM_CHECK(k::gated_delta_rule_cuda_supports(cfg_.gdn_d_k),
                 "op gated_delta_rule, dtype bf16, device cuda: d_k {} is not supported (16..256, "
                 "powers of 2)",
                 cfg_.gdn_d_k);
  }
#endif
  if (ctx_.device == Device::kCuda && ctx_.cuda_stream == nullptr) {
    ctx_.cuda_stream = cuda_stream_create();  // a real stream, so steps can be graph-captured
    owns_stream_ = true;
  }
  // The prefill path of FP8 matrices on CUDA dequantises each into one buffer, sized here for
  // loaded and synthetic weights alike, so that no step allocates.
  if (const int64_t n = max_fp8_numel(w_); n > 0) k::linear_reserve_fp8_scratch(n, ctx_.device);
  // The decode linear's split-mode workspace (16 MB): batches of decode rows whose matrices have
  // few 128-row tiles spread their k ranks over the GPU through it.
  k::linear_reserve_decode_workspace(ctx_.device);
  // The prefill GEMMs' handles and workspaces, before an engine sizes its pools from what is free.
  k::linear_reserve_prefill_gemms(ctx_.device, max_fp8_numel(w_) > 0);
}

Qwen35Model::~Qwen35Model() {
  if (owns_stream_) cuda_stream_destroy(ctx_.cuda_stream);
}

Tensor Qwen35Model::hidden(int64_t n) const { return rows(s_->hidden, n); }

int64_t Qwen35Model::max_step_rows() const { return s_->residual.dim(0); }

void Qwen35Model::forward(const StepBatch& b, const CacheViews& cache, const Tensor& logits) {
  ForwardScratch& s = *s_;
  const int64_t n = b.n_rows;
  TANDEM_CHECK(n >= 1 && n <= s.residual.dim(0), "forward: {} rows outside the step buffer of {}",
               n, s.residual.dim(0));
  TANDEM_CHECK(static_cast<int64_t>(cache.layers.size()) == cfg_.num_layers,
               "forward: cache views for {} layers, the model has {}", cache.layers.size(),
               cfg_.num_layers);
  k::embedding(
      {.ids = b.token_ids.slice(0, 0, n), .table = w_.embed_tokens, .out = rows(s.residual, n)},
      ctx_);
  observe("embed", -1, rows(s.residual, n));
  for (int64_t l = 0; l < cfg_.num_layers; ++l)
    decoder_layer(w_.layers[l], l, b, cache.layers[l], cache.attn_workspace, l > 0);
  final_norm(w_.final_norm, rows(s.hidden, n), n);
  observe("hidden", -1, rows(s.hidden, n));
  logits_of(b, rows(s.hidden, n), logits, w_.lm_head);
}

void Qwen35Model::decoder_layer(const DecoderLayerWeights& w, int64_t layer, const StepBatch& b,
                                const LayerCacheView& cache, const Tensor& workspace,
                                bool pending_add) {
  ForwardScratch& s = *s_;
  const int64_t n = b.n_rows;
  const bool folded = w_.norms_folded;  // the norms are in the projections: no launches here
  if (!folded) {
    // residual += pending mixer/MLP output of the previous block; normed = norm(residual).
    k::rms_norm({.x = rows(pending_add ? s.mixed : s.residual, n),
                 .weight = w.input_norm,
                 .out = rows(s.normed, n),
                 .residual = pending_add ? rows(s.residual, n) : Tensor(),
                 .eps = cfg_.rms_norm_eps},
                ctx_);
    observe("attn_norm", layer, rows(s.normed, n));
  }
  if (w.type == LayerType::kFullAttention) {
    attention_mixer(w, layer, b, cache, workspace);
  } else {
    gdn_mixer(w, layer, b, cache);
  }
  if (!folded) {
    observe("mixer_out", layer, rows(s.mixed, n));
    k::rms_norm({.x = rows(s.mixed, n),
                 .weight = w.post_attention_norm,
                 .out = rows(s.normed, n),
                 .residual = rows(s.residual, n),
                 .eps = cfg_.rms_norm_eps},
                ctx_);
    observe("ffn_norm", layer, rows(s.normed, n));
  }
  mlp(w.mlp, layer, b);
  observe(folded ? "residual" : "ffn_out", layer, rows(folded ? s.residual : s.mixed, n));
}

void Qwen35Model::gdn_mixer(const DecoderLayerWeights& w, int64_t layer, const StepBatch& b,
                            const LayerCacheView& cache) {
  ForwardScratch& s = *s_;
  const GdnWeights& g = w.gdn;
  const int64_t n = b.n_rows;
  project(g.in_proj, rows(s.gdn_in, n), b);  // qkv|z|b|a
  // Decode/verify sequences keep their rows in the conv history and the replay buffer (the next
  // step folds the accepted ones); prefill chunks fold everything at once (next n_acc = 0).
  struct Part {
    kernels::SeqLayout seqs;
    Tensor n_acc, slot, parity, start;
    bool prefill;
  };
  const Part parts[2] = {{b.decode_seqs(), b.decode_part(b.n_acc), b.decode_part(b.gdn_slot),
                          b.decode_part(b.parity), b.decode_part(b.start_position), false},
                         {b.prefill_seqs(), b.prefill_part(b.n_acc), b.prefill_part(b.gdn_slot),
                          b.prefill_part(b.parity), b.prefill_part(b.start_position), true}};
  for (const Part& p : parts) {
    if (p.seqs.n_seqs == 0) continue;
    k::conv1d({.x = rows(s.qkv, n),
               .weight = g.conv1d,
               .history = cache.conv_history,
               .out = rows(s.conv_out, n),
               .seqs = p.seqs,
               .slot = p.slot,
               .n_acc = p.n_acc,
               .mode = p.prefill ? k::ConvHistoryMode::kCompact : k::ConvHistoryMode::kSpec},
              ctx_);
  }
  observe("conv_out", layer, rows(s.conv_out, n));
  const int64_t kd = cfg_.gdn_key_dim(), vd = cfg_.gdn_value_dim();
  const Tensor y = rows(s.conv_out, n);  // [T, q kd | k kd | v vd]
  for (const Part& p : parts) {
    if (p.seqs.n_seqs == 0) continue;
    k::gated_delta_rule({.q = y.slice(1, 0, kd).split_heads(cfg_.gdn_heads_k),
                         .k = y.slice(1, kd, 2 * kd).split_heads(cfg_.gdn_heads_k),
                         .v = y.slice(1, 2 * kd, 2 * kd + vd).split_heads(cfg_.gdn_heads_v),
                         .a = rows(s.decay_raw, n),
                         .b = rows(s.beta_raw, n),
                         .a_log = g.a_log,
                         .dt_bias = g.dt_bias,
                         .state = cache.ssm,
                         .replay = cache.replay,
                         .out = rows(s.gdn_out, n).split_heads(cfg_.gdn_heads_v),
                         .seqs = p.seqs,
                         .slot = p.slot,
                         .n_acc = p.n_acc,
                         .parity = p.parity,
                         .start_position = p.start,
                         .mode = p.prefill ? k::GdrMode::kChunked : k::GdrMode::kRecurrent,
                         .norm = {.z = rows(s.z, n).split_heads(cfg_.gdn_heads_v),
                                  .weight = g.norm,
                                  .out = rows(s.gdn_normed, n).split_heads(cfg_.gdn_heads_v),
                                  .eps = cfg_.rms_norm_eps}},
                        ctx_);
  }
  observe("gdn_out", layer, rows(s.gdn_out, n));
  k::linear(to_residual(rows(s.gdn_normed, n), g.out_proj, b), ctx_);
}

void Qwen35Model::attention_mixer(const DecoderLayerWeights& w, int64_t layer, const StepBatch& b,
                                  const LayerCacheView& cache, const Tensor& workspace) {
  ForwardScratch& s = *s_;
  const AttentionWeights& a = w.attn;
  const int64_t n = b.n_rows;
  const int64_t hq = cfg_.num_heads_q, hkv = cfg_.num_heads_kv, d = cfg_.head_dim;
  project(a.qkv_proj, rows(s.attn_in, n), b);  // q|k|v
  // q_proj rows are per head [query | gate]: view [T, Nq, 2D] and split the last dim.
  const Tensor qg = rows(s.q_gate, n).split_heads(hq);  // [T, Nq, 2D]
  const Tensor q = qg.slice(2, 0, d), gate = qg.slice(2, d, 2 * d);
  const Tensor key = rows(s.k, n).split_heads(hkv), value = rows(s.v, n).split_heads(hkv);
  // q_norm / k_norm with the partial RoPE, then the KV write (one launch on CUDA).
  k::attention_inputs({.q = q,
                       .q_norm = a.q_norm,
                       .k_norm = a.k_norm,
                       .eps = cfg_.rms_norm_eps,
                       .rope_dim = static_cast<int>(cfg_.rotary_dim),
                       .rope_theta = cfg_.rope_theta,
                       .positions = b.positions.slice(0, 0, n),
                       .kv = {.k = key,
                              .v = value,
                              .slots = b.kv_slots.slice(0, 0, n),
                              .k_cache = cache.k_cache,
                              .v_cache = cache.v_cache}},
                      ctx_);
  const Tensor out = rows(s.attn_out, n).split_heads(hq);
  const kernels::SeqLayout seqs[2] = {b.decode_seqs(), b.prefill_seqs()};
  for (int part = 0; part < 2; ++part) {
    if (seqs[part].n_seqs == 0) continue;
    const bool prefill = part == 1;
    k::attention(
        {.q = q,
         .gate = gate,
         .k_cache = cache.k_cache,
         .v_cache = cache.v_cache,
         .block_tables = prefill ? b.prefill_part(b.block_tables) : b.decode_part(b.block_tables),
         .kv_len = prefill ? b.prefill_part(b.kv_len) : b.decode_part(b.kv_len),
         .out = out,
         .seqs = seqs[part],
         .prefill = prefill,
         .workspace = workspace},
        ctx_);
  }
  observe("attn_out", layer, rows(s.attn_out, n));
  k::linear(to_residual(rows(s.attn_out, n), a.o_proj, b), ctx_);
}

void Qwen35Model::mlp(const MlpWeights& w, int64_t layer, const StepBatch& b) {
  ForwardScratch& s = *s_;
  const int64_t n = b.n_rows;
  // gate|up projection and SwiGLU in one call (one launch on the decode path).
  k::LinearArgs gate_up = from_norm(w.gate_up_proj, rows(s.mlp_act, n), b);
  gate_up.epilogue = k::LinearEpilogue::kSwiGluPairs;
  gate_up.scratch = rows(s.gate_up, n);
  k::linear(gate_up, ctx_);
  k::linear(to_residual(rows(s.mlp_act, n), w.down_proj, b), ctx_);
}

void Qwen35Model::mtp_forward(const StepBatch& b, const CacheViews& cache, const Tensor& hidden_in,
                              const Tensor& hidden_out, const Tensor& logits,
                              const LinearWeight* head) {
  TANDEM_CHECK(w_.mtp.has_value(), "this checkpoint has no mtp.* tensors: MTP is unavailable");
  ForwardScratch& s = *s_;
  const MtpWeights& m = *w_.mtp;
  const int64_t n = b.n_rows;
  const int64_t h = cfg_.hidden_size, layer = cfg_.num_layers;  // MTP activations named layer L
  TANDEM_CHECK(n >= 1 && n <= s.residual.dim(0) && hidden_in.dim(0) == n && hidden_out.dim(0) == n,
               "mtp_forward: {} rows, hidden_in {} hidden_out {}, step buffer {}", n,
               hidden_in.describe(), hidden_out.describe(), s.residual.dim(0));
  // mtp_in = [norm_e(embed(x_{t+1})) ; norm_h(h_t)] written straight into the two halves.
  const Tensor in = rows(s.mtp_in, n);
  k::embedding(
      {.ids = b.token_ids.slice(0, 0, n), .table = w_.embed_tokens, .out = rows(s.normed, n)},
      ctx_);
  k::rms_norm({.x = rows(s.normed, n),
               .weight = m.pre_fc_norm_embedding,
               .out = in.slice(1, 0, h),
               .eps = cfg_.rms_norm_eps},
              ctx_);
  k::rms_norm({.x = hidden_in,
               .weight = m.pre_fc_norm_hidden,
               .out = in.slice(1, h, 2 * h),
               .eps = cfg_.rms_norm_eps},
              ctx_);
  k::linear(with_weight({.x = in, .out = rows(s.residual, n), .decode_rows = b.decode_rows}, m.fc),
            ctx_);
  observe("mtp_fc", layer, rows(s.residual, n));
  decoder_layer(m.layer, layer, b, cache.mtp, cache.attn_workspace, false);
  final_norm(m.norm, hidden_out, n);
  observe("mtp_hidden", layer, hidden_out);
  logits_of(b, hidden_out, logits, head != nullptr ? *head : w_.lm_head);
}

}  // namespace tandem
