// tandem bench: batched step costs at depth, against the memory and tensor-core bounds.
#include "engine/bench.h"

#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "cache/state_pool.h"
#include "cache/step_buffers.h"
#include "core/clock.h"
#include "core/cuda_graph.h"
#include "engine/synthetic.h"
#include "kernels/argmax/argmax.h"
#include "spec/mtp_drafter.h"

namespace tandem {

namespace {

void randomize(const StatePool& pool, uint64_t seed) {
  auto fill = [&](const Tensor& t, float lo, float hi) {
    if (t.raw()) fill_uniform(t, seed++, lo, hi);
  };
  for (const LayerCacheView& v : pool.views().layers) {
    fill(v.k_cache, -1.f, 1.f), fill(v.v_cache, -1.f, 1.f);
    fill(v.ssm, -0.05f, 0.05f), fill(v.conv_history, -1.f, 1.f), fill(v.replay, -1.f, 1.f);
  }
  fill(pool.views().mtp.k_cache, -1.f, 1.f), fill(pool.views().mtp.v_cache, -1.f, 1.f);
}

// B sequences at one depth, and the timing of their steps.
struct BatchAtDepth {
  Qwen35Model& model;
  StatePool pool;
  StepBuffers buffers;
  std::vector<SequenceCache> seqs;
  Tensor logits, ids;
  int64_t depth;
  SequenceCache prefilling;  // the mixed step's prefilling sequence
  std::vector<int32_t> chunk_tokens;

  // chunk > 0: one more sequence whose prefill chunk of that many rows can join a decode step.
  BatchAtDepth(Qwen35Model& m, const CacheConfig& cc, int64_t b, int64_t depth_, int64_t chunk)
      : model(m),
        pool(m.config(), cc, m.context(), m.act_dtype(), b * cc.step_rows + chunk),
        buffers(m.max_step_rows(), b + (chunk > 0 ? 1 : 0), cc.table_width(), cc.block_size,
                pool.scratch_block(), pool.scratch_slot(), m.context().device),
        seqs(b),
        logits(Tensor::zeros({b * cc.step_rows, m.config().vocab_size}, DType::kF32,
                             m.context().device)),
        ids(Tensor::zeros({b * cc.step_rows}, DType::kI32, m.context().device)),
        depth(depth_) {
    for (SequenceCache& s : seqs) {
      TANDEM_CHECK(pool.acquire(s) && pool.reserve(s, cc.max_model_len), "bench: pool too small");
      s.n_past = depth;
      s.n_acc = 1;  // every step folds one row, as a decode step after a decode step does
    }
    if (chunk > 0) {
      TANDEM_CHECK(pool.acquire(prefilling) && pool.reserve(prefilling, chunk),
                   "bench: pool too small for the prefill chunk");
      chunk_tokens.assign(static_cast<size_t>(chunk), 1);
    }
    randomize(pool, 1000 + static_cast<uint64_t>(depth));  // after acquire, which zeroes states
  }

  // Decode or verify rows for every sequence; with_chunk: the prefill chunk too (the prompt's
  // first chunk, at position 0, as a request admitted while the others decode).
  StepPlan plan(int64_t rows, int64_t start, bool with_chunk = false) {
    static const std::vector<int32_t> tokens(64, 1);
    std::vector<PlannedSeq> p;
    for (SequenceCache& s : seqs) {
      p.push_back({.cache = &s,
                   .tokens = std::span<const int32_t>(tokens.data(), rows),
                   .rows = rows,
                   .start = start,
                   .decode = true,
                   .logits = LogitRows::kAll});
    }
    if (with_chunk) {
      const auto n = static_cast<int64_t>(chunk_tokens.size());
      p.push_back({.cache = &prefilling,
                   .tokens = chunk_tokens,
                   .rows = n,
                   .start = 0,
                   .decode = false,
                   .logits = LogitRows::kLast});
    }
    return buffers.plan(p);
  }

  // Seconds per eager decode step (one row per sequence), with or without the prefill chunk.
  double time_eager(bool with_chunk, int steps) {
    const ExecContext& ctx = model.context();
    const int64_t n = static_cast<int64_t>(seqs.size()) + (with_chunk ? 1 : 0);
    auto run = [&](int64_t start) {
      model.forward(plan(1, start, with_chunk).batch, pool.views(), logits.slice(0, 0, n));
      kernels::argmax({logits.slice(0, 0, n), ids.slice(0, 0, n)}, ctx);
    };
    for (int i = 0; i < 2; ++i) run(depth);  // warm-up
    device_synchronize(ctx.device);
    const double t0 = monotonic_seconds();
    for (int i = 0; i < steps; ++i) run(depth + i);
    device_synchronize(ctx.device);
    return (monotonic_seconds() - t0) / steps;
  }

  // Seconds per step of `rows` rows per sequence; positions advance by `advance` per step.
  double time_steps(int64_t rows, int64_t advance, int steps, bool graphs) {
    const ExecContext& ctx = model.context();
    const int64_t n = rows * static_cast<int64_t>(seqs.size());
    CudaGraph graph;
    auto run = [&](const StepPlan& p) {
      if (graph.ready()) return graph.launch(ctx.cuda_stream);
      model.forward(p.batch, pool.views(), logits.slice(0, 0, n));
      kernels::argmax({logits.slice(0, 0, n), ids.slice(0, 0, n)}, ctx);
    };
    StepPlan p = plan(rows, depth);
    if (graphs && ctx.device == Device::kCuda) {
      graph.begin_capture(ctx.cuda_stream);
      model.forward(p.batch, pool.views(), logits.slice(0, 0, n));
      kernels::argmax({logits.slice(0, 0, n), ids.slice(0, 0, n)}, ctx);
      graph.end_capture(ctx.cuda_stream);
    }
    for (int i = 0; i < 3; ++i) run(p);  // warm-up
    device_synchronize(ctx.device);
    const double t0 = monotonic_seconds();
    for (int i = 0; i < steps; ++i) {
      p = plan(rows, depth + i * advance);
      run(p);
    }
    device_synchronize(ctx.device);
    return (monotonic_seconds() - t0) / steps;
  }
};

int64_t matrix_params(const Qwen35Model& model) { return weight_params_per_step(model.weights()); }

}  // namespace

HardwareBounds hardware_bounds(std::string_view device) {
  constexpr double kH200Bytes = 4.3e12, kH200Flops = 790e12;  // DESIGN.md section 6, measured
  if (device.find("H200") != std::string_view::npos) {
    return {kH200Bytes, kH200Flops, "H200: measured copy bandwidth, dense bf16"};
  }
  if (device.find("H100") != std::string_view::npos) {
    // The SXM part (80GB HBM3): its copy bandwidth measured (kernel_bench copy, 2026-12-06: 3.04
    // TB/s, 0.907 of its 3.35 specified; the H200's ratio, 4.3 / 4.8, had given 3.0). PCIe (2.0
    // specified) and NVL (3.9): specified x that ratio, not measured. The SXM part's tensor cores
    // and clocks are the H200's (the others' are lower: their dense bf16 rate is not known here,
    // so the H200's stands, an optimistic bound).
    constexpr double kSxmBytes = 3.04e12, kSxmSpecified = 3.35e12;
    const bool pcie = device.find("PCIe") != std::string_view::npos;
    const bool nvl = device.find("NVL") != std::string_view::npos;
    if (!pcie && !nvl) {
      return {kSxmBytes, kH200Flops, "H100 SXM: measured copy bandwidth, the H200's dense bf16"};
    }
    const double spec = pcie ? 2.0e12 : 3.9e12;
    return {spec * kSxmBytes / kSxmSpecified, kH200Flops,
            fmt::format("{}: {:.2f} TB/s specified x the H100 SXM's measured / specified "
                        "bandwidth (not measured), the H200's dense bf16",
                        pcie ? "H100 PCIe" : "H100 NVL", spec / 1e12)};
  }
  return {kH200Bytes, kH200Flops, "the H200's (no bounds known for this device)"};
}

nlohmann::json run_bench(Qwen35Model& model, const BenchOptions& opt) {
  const ModelConfig& c = model.config();
  const int k = opt.num_speculative_tokens;
  const bool mtp = opt.mtp && model.has_mtp();
  const int64_t act_bytes = dtype_size(model.act_dtype());
  const int64_t weights = weight_bytes_per_step(model.weights());
  const double params = static_cast<double>(matrix_params(model));
  const int64_t state_bytes = c.num_gdn_layers() * c.gdn_heads_v * c.gdn_d_k * c.gdn_d_v * 4;
  nlohmann::json results = nlohmann::json::array();
  for (int64_t ctx_len : opt.contexts) {
    for (int64_t b : opt.batches) {
      TANDEM_CHECK(b * (k + 1) <= model.max_step_rows(),
                   "bench: batch {} x {} rows exceeds the step buffer of {} (raise "
                   "--max-step-tokens)",
                   b, k + 1, model.max_step_rows());
      CacheConfig cc{.block_size = 64,
                     .step_rows = k + 1,
                     .max_model_len = (ctx_len + opt.steps + 2 * (k + 1) + 127) / 64 * 64,
                     .with_mtp = model.has_mtp()};
      const int64_t chunk = opt.mixed_prefill_tokens;
      TANDEM_CHECK(chunk == 0 || b + chunk <= model.max_step_rows(),
                   "bench: batch {} plus a prefill chunk of {} exceeds the step buffer of {} "
                   "(raise --max-step-tokens)",
                   b, chunk, model.max_step_rows());
      cc.max_model_len = std::max(cc.max_model_len, (chunk + 63) / 64 * 64);
      cc.num_slots = b + (chunk > 0 ? 1 : 0);
      cc.num_blocks = cc.num_slots * cc.max_blocks_per_seq();
      BatchAtDepth run(model, cc, b, ctx_len, chunk);
      const auto bd = static_cast<double>(b);
      // Bytes: weights once; per sequence its KV to the depth and its GDN state read and written.
      auto bytes = [&](int64_t rows) {
        const int64_t kv = 2 * c.num_attention_layers() * (ctx_len + rows) * c.num_heads_kv *
                           c.head_dim * act_bytes;
        return static_cast<double>(weights) + bd * static_cast<double>(kv + 2 * state_bytes);
      };
      auto flops = [&](int64_t rows) {  // matrices + attention (QK^T and PV over the depth)
        const double r = bd * static_cast<double>(rows);
        return 2.0 * r * params + 4.0 * r * static_cast<double>(ctx_len) * c.num_heads_q *
                                      c.head_dim * c.num_attention_layers();
      };
      auto entry = [&](int64_t rows, double t) {
        const double mem = bytes(rows) / opt.peak_bytes_per_s, tc = flops(rows) / opt.peak_flops;
        return nlohmann::json{{"ms", t * 1e3},
                              {"memory_bound_ms", mem * 1e3},
                              {"tensor_bound_ms", tc * 1e3},
                              {"fraction_of_memory_bound", mem / t},
                              {"fraction_of_tensor_bound", tc / t},
                              {"fraction_of_bound", std::max(mem, tc) / t}};
      };
      const double t_decode = run.time_steps(1, 1, opt.steps, opt.graphs);
      nlohmann::json r{{"context", ctx_len}, {"batch", b}};
      r["decode"] = entry(1, t_decode);
      r["decode"]["tokens_per_second"] = bd / t_decode;
      r["decode_ms"] = t_decode * 1e3;
      r["decode_tokens_per_second"] = bd / t_decode;
      r["fraction_of_memory_bound"] = r["decode"]["fraction_of_memory_bound"];
      std::vector<double> t_verify(k + 1, t_decode);
      nlohmann::json verify = nlohmann::json::array();
      for (int d = 1; d <= k; ++d) {
        t_verify[d] = run.time_steps(d + 1, 0, opt.steps, opt.graphs);
        nlohmann::json v = entry(d + 1, t_verify[d]);
        v["drafts"] = d;
        v["verify_ms"] = t_verify[d] * 1e3;
        v["verify_over_decode"] = t_verify[d] / t_decode;
        verify.push_back(v);
      }
      r["verify"] = verify;
      if (chunk > 0) {  // a prefill chunk joining the decode step (eager both: mixed steps are)
        const double plain = run.time_eager(false, opt.steps);
        const double mixed = run.time_eager(true, opt.steps);
        r["mixed_step"] = {
            {"prefill_chunk_tokens", chunk},
            {"decode_eager_ms", plain * 1e3},
            {"decode_with_chunk_ms", mixed * 1e3},
            {"chunk_ms", (mixed - plain) * 1e3},
            {"chunk_tokens_per_second", static_cast<double>(chunk) / (mixed - plain)},
            {"over_decode", mixed / plain}};
      }
      if (mtp && k >= 1) {
        std::vector<int32_t> draft_vocab(static_cast<size_t>(opt.draft_vocab_size));
        std::iota(draft_vocab.begin(), draft_vocab.end(), 0);
        MtpDrafter drafter(model, draft_vocab);
        drafter.prepare(DrafterSetup{.cache = &run.pool.views(),
                                     .block_size = cc.block_size,
                                     .table_width = cc.table_width(),
                                     .scratch_block = run.pool.scratch_block(),
                                     .scratch_slot = run.pool.scratch_slot(),
                                     .max_seqs = b,
                                     .k_max = k});
        const StepPlan p = run.plan(1, ctx_len);
        model.forward(p.batch, run.pool.views(), run.logits.slice(0, 0, b));
        const int32_t next = 1;
        std::vector<TargetRows> rows;
        std::vector<DraftAsk> asks1, asks;
        for (int64_t i = 0; i < b; ++i) {
          drafter.begin_sequence(i);
          rows.push_back({i, &run.seqs[i], i, ctx_len, std::span<const int32_t>(&next, 1)});
          asks1.push_back({i, &run.seqs[i], 1, {}});
          asks.push_back({i, &run.seqs[i], k, {}});
        }
        auto time_drafts = [&](const std::vector<DraftAsk>& a) {
          drafter.after_target_step(rows);
          drafter.propose(a);  // warm-up
          device_synchronize(model.context().device);
          const double t0 = monotonic_seconds();
          for (int i = 0; i < opt.steps; ++i) {
            drafter.after_target_step(rows);
            drafter.propose(a);
          }
          device_synchronize(model.context().device);
          return (monotonic_seconds() - t0) / opt.steps;
        };
        const double t_first = time_drafts(asks1), t_draft = time_drafts(asks);
        const double t_chain = k > 1 ? (t_draft - t_first) / (k - 1) : 0.0;
        r["draft_ms"] = t_draft * 1e3;
        r["draft_first_pass_ms"] = t_first * 1e3;
        r["draft_chain_step_ms"] = t_chain * 1e3;
        r["break_even_acceptance_length"] = (t_verify[k] + t_draft) / t_decode;
        // Projection at a stated acceptance per draft: the best k (0 = plain).
        double best = bd / t_decode;
        int best_k = 0;
        nlohmann::json proj = nlohmann::json::array();
        for (int d = 1; d <= k; ++d) {
          double e = 1.0, reach = 1.0;
          for (int i = 0; i < d; ++i) e += (reach *= opt.acceptance);
          const double rate = bd * e / (t_verify[d] + t_first + (d - 1) * t_chain);
          proj.push_back(
              {{"drafts", d}, {"tokens_per_second", rate}, {"over_plain", rate * t_decode / bd}});
          if (rate > best) best = rate, best_k = d;
        }
        r["mtp_projection"] = {{"acceptance_per_draft", opt.acceptance},
                               {"per_k", proj},
                               {"controlled_k", best_k},
                               {"controlled_tokens_per_second", best},
                               {"controlled_over_plain", best * t_decode / bd}};
      }
      results.push_back(r);
    }
  }
  nlohmann::json out{{"device", device_description(model.context().device)},
                     {"weight_bytes_per_step", weights},
                     {"graphs", opt.graphs && model.context().device == Device::kCuda},
                     {"programmatic_launch",
                      cuda_programmatic_launch() && model.context().device == Device::kCuda},
                     {"num_speculative_tokens", k},
                     {"peak_bytes_per_second", opt.peak_bytes_per_s},
                     {"peak_flops", opt.peak_flops},
                     {"bounds_basis", opt.bounds_basis},
                     {"results", results}};
  if (opt.prefill_tokens > 0) {
    const int64_t p = opt.prefill_tokens;
    CacheConfig cc{.block_size = 64, .num_slots = 1, .step_rows = 1, .max_model_len = p + 64};
    cc.num_blocks = cc.max_blocks_per_seq();
    StatePool pool(c, cc, model.context(), model.act_dtype(), 1);
    StepBuffers buffers(model.max_step_rows(), 1, cc.table_width(), cc.block_size,
                        pool.scratch_block(), pool.scratch_slot(), model.context().device);
    std::vector<int32_t> ids(p);
    for (int64_t i = 0; i < p; ++i) ids[i] = static_cast<int32_t>((i * 7919) % c.vocab_size);
    const int64_t chunk = model.max_step_rows() / 64 * 64;
    auto prefill = [&] {
      SequenceCache s;
      TANDEM_CHECK(pool.acquire(s) && pool.reserve(s, p), "bench: prefill pool too small");
      for (int64_t at = 0; at < p; at += chunk) {
        const int64_t n = std::min(chunk, p - at);
        const PlannedSeq q{.cache = &s,
                           .tokens = std::span<const int32_t>(ids.data() + at, n),
                           .rows = n,
                           .start = at,
                           .decode = false};
        model.forward(buffers.plan(std::span<const PlannedSeq>(&q, 1)).batch, pool.views(),
                      Tensor());
        s.commit_prefill(n);
      }
      device_synchronize(model.context().device);
      pool.release(s);
    };
    prefill();  // warm-up
    const double t0 = monotonic_seconds();
    prefill();
    const double t = monotonic_seconds() - t0;
    const double matrix_flops = 2.0 * static_cast<double>(p) * params;
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
