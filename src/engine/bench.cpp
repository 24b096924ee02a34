// tandem bench: step costs at depth, fraction of the memory bound, verify/decode ratios.
#include "engine/bench.h"

#include <chrono>

#include "core/cuda_graph.h"
#include "engine/synthetic.h"
#include "spec/mtp_drafter.h"

namespace tandem {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void randomize_state(SequenceState& st, uint64_t seed) {
  for (auto& kv : st.kv) {
    if (kv.k.raw()) fill_uniform(kv.k, seed++, -1.f, 1.f), fill_uniform(kv.v, seed++, -1.f, 1.f);
  }
  if (st.mtp_kv.k.raw())
    fill_uniform(st.mtp_kv.k, seed++, -1.f, 1.f), fill_uniform(st.mtp_kv.v, seed++, -1.f, 1.f);
  for (auto& g : st.gdn) {
    if (g.ssm.raw())
      fill_uniform(g.ssm, seed++, -0.05f, 0.05f), fill_uniform(g.conv_history, seed++, -1.f, 1.f);
  }
}

// Times `steps` target steps of n tokens; positions start at `start` and advance by `advance`.
double time_steps(Qwen35Model& model, SequenceState& st, const Tensor& logits, int64_t n,
                  int64_t start, int64_t advance, int steps, bool graphs) {
  const ExecContext& ctx = model.context();
  std::vector<int32_t> tokens(n, 1);
  CudaGraph graph;
  auto plan = [&](int i) {
    st.target.plan(tokens.data(), n, start + i * advance, st.config().max_context);
  };
  auto run = [&] {
    if (graph.ready()) return graph.launch(ctx.cuda_stream);
    model.forward(st, n, StepKind::kVerify, start, logits.slice(0, 0, n), 0);
  };
  plan(0);
  if (graphs && ctx.device == Device::kCuda) {
    graph.begin_capture(ctx.cuda_stream);
    model.forward(st, n, StepKind::kVerify, start, logits.slice(0, 0, n), 0);
    graph.end_capture(ctx.cuda_stream);
  }
  for (int i = 0; i < 3; ++i) run();  // warm-up
  device_synchronize(ctx.device);
  const double t0 = now();
  for (int i = 0; i < steps; ++i) {
    plan(i);
    run();
  }
  device_synchronize(ctx.device);
  return (now() - t0) / steps;
}

}  // namespace

nlohmann::json run_bench(Qwen35Model& model, const BenchOptions& opt) {
  const ModelConfig& c = model.config();
  const int k = opt.num_speculative_tokens;
  const bool mtp = opt.mtp && model.has_mtp();
  const int64_t act_bytes = dtype_size(model.act_dtype());
  const int64_t weights = weight_bytes_per_step(model.weights());
  nlohmann::json results = nlohmann::json::array();
  for (int64_t ctx_len : opt.contexts) {
    StateConfig sc{.max_context = (ctx_len + opt.steps + 2 * (k + 1) + 127) / 64 * 64,
                   .k_max = k,
                   .block_size = 64,
                   .max_step_tokens = model.max_step_tokens()};
    SequenceState st(c, sc, model.context().device, model.act_dtype(), model.has_mtp());
    randomize_state(st, 1000 + static_cast<uint64_t>(ctx_len));
    st.n_past = ctx_len;
    Tensor logits = Tensor::zeros({k + 1, c.vocab_size}, DType::kF32, model.context().device);
    const double t_decode = time_steps(model, st, logits, 1, ctx_len, 1, opt.steps, opt.graphs);
    const int64_t kv_bytes =
        2 * c.num_attention_layers() * ctx_len * c.num_heads_kv * c.head_dim * act_bytes;
    const int64_t state_bytes = 2 * c.num_gdn_layers() * c.gdn_heads_v * c.gdn_d_k * c.gdn_d_v * 4;
    const double bound =
        static_cast<double>(weights + kv_bytes + state_bytes) / opt.peak_bytes_per_s;
    nlohmann::json r{{"context", ctx_len},
                     {"decode_ms", t_decode * 1e3},
                     {"decode_tokens_per_second", 1.0 / t_decode},
                     {"bytes_per_step", weights + kv_bytes + state_bytes},
                     {"bound_ms", bound * 1e3},
                     {"fraction_of_memory_bound", bound / t_decode}};
    nlohmann::json verify = nlohmann::json::array();
    for (int d = 1; d <= k; ++d) {
      const double t = time_steps(model, st, logits, d + 1, ctx_len, 0, opt.steps, opt.graphs);
      verify.push_back(
          {{"drafts", d}, {"verify_ms", t * 1e3}, {"verify_over_decode", t / t_decode}});
    }
    r["verify"] = verify;
    if (mtp) {
      MtpDrafter drafter(model);
      drafter.prepare(st, k, opt.graphs);  // its forwards from CUDA graphs, like the verify steps
      const int32_t next = 1;
      st.target.plan(&next, 1, ctx_len, sc.max_context);
      model.forward(st, 1, StepKind::kVerify, ctx_len, logits.slice(0, 0, 1), 0);
      device_synchronize(model.context().device);
      const double t0 = now();
      for (int i = 0; i < opt.steps; ++i) {
        drafter.after_target_step(st, std::span<const int32_t>(&next, 1), ctx_len);
        drafter.propose(st, k, {});
      }
      device_synchronize(model.context().device);
      const double t_draft = (now() - t0) / opt.steps;
      const double t_verify = verify.back()["verify_ms"].get<double>() / 1e3;
      r["draft_ms"] = t_draft * 1e3;
      // Speculation pays when the mean acceptance length exceeds this.
      r["break_even_acceptance_length"] = (t_verify + t_draft) / t_decode;
    }
    results.push_back(r);
  }
  nlohmann::json out{{"device", device_description(model.context().device)},
                     {"weight_bytes_per_step", weights},
                     {"graphs", opt.graphs && model.context().device == Device::kCuda},
                     {"programmatic_launch",
                      cuda_programmatic_launch() && model.context().device == Device::kCuda},
                     {"num_speculative_tokens", k},
                     {"peak_bytes_per_second", opt.peak_bytes_per_s},
                     {"results", results}};
  if (opt.prefill_tokens > 0) {
    const int64_t p = opt.prefill_tokens;
    StateConfig sc{.max_context = p + 64,
                   .k_max = 0,
                   .block_size = 64,
                   .max_step_tokens = model.max_step_tokens()};
    SequenceState st(c, sc, model.context().device, model.act_dtype(), false);
    std::vector<int32_t> ids(p);
    for (int64_t i = 0; i < p; ++i) ids[i] = static_cast<int32_t>((i * 7919) % c.vocab_size);
    const int64_t chunk = model.max_step_tokens();
    auto prefill = [&] {
      st.reset();
      for (int64_t s = 0; s < p; s += chunk) {
        const int64_t n = std::min(chunk, p - s);
        st.target.plan(ids.data() + s, n, s, sc.max_context);
        model.forward(st, n, StepKind::kPrefill, s, Tensor(), n);
        st.set_n_acc(1);
      }
      device_synchronize(model.context().device);
    };
    prefill();  // warm-up
    const double t0 = now();
    prefill();
    const double t = now() - t0;
    // Weight bytes over the weights' element size: every parameter is one multiply-add per token.
    const double weight_elem = static_cast<double>(dtype_size(model.weights().lm_head.dtype()));
    const double matrix_flops =
        2.0 * static_cast<double>(p) * static_cast<double>(weights) / weight_elem;
    const double attn_flops = 2.0 * static_cast<double>(p) * static_cast<double>(p) *
                              c.num_heads_q * c.head_dim *
                              c.num_attention_layers();  // causal QK^T and PV
    out["prefill"] = {{"tokens", p},
                      {"seconds", t},
                      {"tokens_per_second", p / t},
                      {"tflops", (matrix_flops + attn_flops) / t / 1e12},
                      {"fraction_of_peak", (matrix_flops + attn_flops) / t / opt.peak_flops}};
  }
  return out;
}

}  // namespace tandem
