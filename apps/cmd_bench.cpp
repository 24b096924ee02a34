// `tandem bench`: decode, verify and draft step costs at several context depths (plus prefill
// throughput), as fractions of the hardware bounds, written as JSON with device, commit, command.
#include <cstdio>
#include <fstream>

#include "apps/cli_common.h"
#include "apps/commands.h"
#include "core/cuda_graph.h"
#include "engine/bench.h"
#include "engine/synthetic.h"
#include "kernels/diag_skip.h"
#include "kernels/linear/linear.h"
#include "kernels/opt_in.h"

namespace tandem::app {

namespace {
std::vector<int64_t> parse_list(const std::string& csv) {
  std::vector<int64_t> out;
  for (int32_t v : parse_ids(csv)) out.push_back(v);
  return out;
}
}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench", "time decode/verify steps at context depths against the memory bound");
  struct Opts {
    std::string model, synthetic, device = "cpu", contexts = "1024,8192,32768",
                                  speculative = "none,mtp", json, commit, batches = "1", opt_in,
                                  diag_skip;
    int k = 3, steps = 32, threads = 0, linear_variant = 0;
    int64_t prefill = 0, mixed_prefill = 0, max_step = 0, draft_vocab = 0;
    double acceptance = 0.6, peak_tbps = 0, peak_tflops = 0;
    bool no_graphs = false, no_pdl = false;
    std::string fp8_prefill = "tensor-cores";
  };
  auto o = std::make_shared<Opts>();
  auto* src = cmd->add_option_group("model source");
  src->add_option("--model", o->model, "checkpoint directory");
  src->add_option("--synthetic", o->synthetic,
                  "config.json to run with random weights (no checkpoint)");
  src->require_option(1);
  cmd->add_option("--device", o->device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  cmd->add_option("--context", o->contexts, "comma-separated context depths")
      ->capture_default_str();
  cmd->add_option("--batch", o->batches, "comma-separated batch sizes (sequences per step)")
      ->capture_default_str();
  cmd->add_option("--acceptance", o->acceptance,
                  "per-draft acceptance of the MTP projection (synthetic weights accept nothing)")
      ->capture_default_str();
  cmd->add_option("--speculative", o->speculative, "none,mtp: also time the MTP drafter")
      ->capture_default_str();
  cmd->add_option("--num-speculative-tokens", o->k, "verify steps are timed for 1..K drafts")
      ->capture_default_str();
  cmd->add_option("--draft-vocab-size", o->draft_vocab,
                  "time the MTP drafter with a draft vocabulary of the first N token ids (as "
                  "generate's --speculative-token-map would give it); 0 = the whole vocabulary")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "timed steps per measurement")->capture_default_str();
  cmd->add_option("--prefill-tokens", o->prefill, "also time a prefill of this many tokens");
  cmd->add_option("--mixed-prefill-tokens", o->mixed_prefill,
                  "also time each batch's decode step with one request's prefill chunk of this "
                  "many tokens in it (eager, against the eager decode step)");
  cmd->add_option("--max-step-tokens", o->max_step,
                  "rows one step may carry, a multiple of 64 (default: 1024, or enough for the "
                  "largest batch x (1 + K))");
  cmd->add_flag("--no-graphs", o->no_graphs,
                "launch steps eagerly instead of replaying CUDA graphs");
  cmd->add_flag("--no-pdl", o->no_pdl,
                "launch each kernel only after the previous one has finished (no programmatic "
                "dependent launch)");
  cmd->add_option("--linear-variant", o->linear_variant,
                  "cuda: decode-linear variant, numbered as in kernel_bench (0 = production; "
                  "the persistent kernel's configurations 6-9 also take the fused epilogues)")
      ->capture_default_str();
  cmd->add_option("--fp8-prefill", o->fp8_prefill,
                  "cuda, FP8 weights: prefill rows on the tensor cores (FP8 activations), "
                  "dequantize (the matrix to bf16, the bf16 GEMM) or decode-order (the decode "
                  "kernels): to compare them with --prefill-tokens")
      ->check(CLI::IsMember({"tensor-cores", "dequantize", "decode-order"}))
      ->capture_default_str();
  std::string opt_in_help =
      "cuda: comma-separated kernel paths to turn on that are tested for bits but not yet "
      "measured (default off):";
  for (const auto& [name, what] : kernels::kernel_opt_ins())
    opt_in_help += fmt::format(" {} ({});", name, what);
  if (kernels::kernel_opt_ins().empty()) opt_in_help += " none in this build";
  cmd->add_option("--opt-in", o->opt_in, opt_in_help);
  cmd->add_option("--diag-skip", o->diag_skip,
                  "cuda, timing only (the outputs are garbage): leave these kernel classes out of "
                  "every step (comma-separated: gdr, conv, attention), to read what each costs "
                  "inside the step");
  cmd->add_option("--peak-bandwidth", o->peak_tbps,
                  "memory bound's bandwidth in TB/s (default: by the device, hardware_bounds: "
                  "the H200's measured 4.3, an H100 SXM's measured 3.04)");
  cmd->add_option("--peak-tflops", o->peak_tflops,
                  "tensor-core bound's dense bf16 TFLOP/s (default: by the device, 790)");
  cmd->add_option("--json", o->json, "write the results to this JSON file");
  cmd->add_option("--commit", o->commit, "commit id recorded in the JSON");
  cmd->callback([o] {
    const Device device = parse_device(o->device);
    const int threads = resolve_threads(o->threads);
    set_cuda_programmatic_launch(!o->no_pdl);
    if (o->linear_variant != 0) {
      TANDEM_CHECK(device == Device::kCuda, "--linear-variant needs --device cuda");
#ifdef TANDEM_CUDA
      const int n = kernels::linear_skinny_set_variant(0);
      TANDEM_CHECK(o->linear_variant > 0 && o->linear_variant < n,
                   "--linear-variant must be in [0, {}), got {}", n, o->linear_variant);
      kernels::linear_skinny_set_variant(o->linear_variant);
#endif
    }
    set_fp8_prefill(o->fp8_prefill);
    std::vector<std::string> opt_ins;
    if (!o->opt_in.empty()) {
      TANDEM_CHECK(device == Device::kCuda, "--opt-in needs --device cuda");
      opt_ins = kernels::set_kernel_opt_ins(o->opt_in);
    }
    std::vector<std::string> diag_skips;
    if (!o->diag_skip.empty()) {
      TANDEM_CHECK(device == Device::kCuda, "--diag-skip needs --device cuda");
      diag_skips = kernels::set_diag_skips(o->diag_skip);
    }
    TANDEM_CHECK(
        o->peak_tbps >= 0 && o->peak_tflops >= 0,
        "--peak-bandwidth and --peak-tflops must not be negative (0: by the device), got {} and {}",
        o->peak_tbps, o->peak_tflops);
    const ExecContext ctx{.device = device, .n_threads = threads};
    TANDEM_CHECK(o->k >= 1 && o->k <= 8, "--num-speculative-tokens must be in [1, 8], got {}",
                 o->k);
    const bool want_mtp = o->speculative.find("mtp") != std::string::npos;
    const std::vector<int64_t> batches = parse_list(o->batches);
    int64_t max_step = o->max_step;
    if (max_step == 0) {
      max_step = 1024;
      for (int64_t b : batches) max_step = std::max(max_step, (b * (o->k + 1) + 63) / 64 * 64);
    }
    TANDEM_CHECK(max_step % 64 == 0, "--max-step-tokens must be a multiple of 64, got {}",
                 max_step);
    std::unique_ptr<Qwen35Model> model;
    if (!o->synthetic.empty()) {
      ModelConfig cfg = ModelConfig::from_file(o->synthetic);
      Qwen35Weights w = synthetic_qwen35_weights(cfg, device, 42, want_mtp);
      model = std::make_unique<Qwen35Model>(std::move(cfg), std::move(w), ctx, max_step);
    } else {
      model = load_model(EngineOptions{.model_dir = o->model,
                                       .device = device,
                                       .n_threads = threads,
                                       .max_step_rows = max_step});
    }
    std::fprintf(stderr, "%s\n", model->config().summary().c_str());
    TANDEM_CHECK(o->mixed_prefill >= 0, "--mixed-prefill-tokens must be >= 0, got {}",
                 o->mixed_prefill);
    TANDEM_CHECK(o->draft_vocab >= 0 && o->draft_vocab <= model->config().vocab_size,
                 "--draft-vocab-size must be in [0, {}], got {}", model->config().vocab_size,
                 o->draft_vocab);
    BenchOptions b{.contexts = parse_list(o->contexts),
                   .batches = batches,
                   .num_speculative_tokens = o->k,
                   .mtp = want_mtp,
                   .steps = o->steps,
                   .graphs = !o->no_graphs,
                   .prefill_tokens = o->prefill,
                   .mixed_prefill_tokens = o->mixed_prefill,
                   .acceptance = o->acceptance,
                   .draft_vocab_size = o->draft_vocab};
    const HardwareBounds hw = hardware_bounds(device_description(device));
    b.peak_bytes_per_s = o->peak_tbps > 0 ? o->peak_tbps * 1e12 : hw.bytes_per_s;
    b.peak_flops = o->peak_tflops > 0 ? o->peak_tflops * 1e12 : hw.flops;
    b.bounds_basis = o->peak_tbps > 0 || o->peak_tflops > 0 ? "given (--peak-bandwidth, "
                                                              "--peak-tflops) and " +
                                                                  hw.basis
                                                            : hw.basis;
    std::fprintf(stderr, "bounds: %.2f TB/s, %.0f TFLOP/s (%s)\n", b.peak_bytes_per_s / 1e12,
                 b.peak_flops / 1e12, b.bounds_basis.c_str());
    nlohmann::json out = run_bench(*model, b);
    out["command"] = command_line();
    out["model"] = o->synthetic.empty() ? o->model : "synthetic:" + o->synthetic;
    out["commit"] = o->commit;
    out["linear_variant"] = o->linear_variant;
    out["opt_in"] = opt_ins;
    out["diag_skip"] = diag_skips;
    out["draft_vocab_size"] = o->draft_vocab;
    out["config"] = model->config().summary();
    if (!o->json.empty()) {
      std::ofstream f(o->json);
      TANDEM_CHECK(f.good(), "cannot write '{}'", o->json);
      f << out.dump(2) << "\n";
    }
    std::printf("%-8s %6s %10s %10s %8s %8s", "context", "batch", "decode_ms", "tok/s", "of_mem",
                "of_tc");
    for (int d = 1; d <= o->k; ++d) std::printf("  verify%d/dec", d);
    std::printf("%10s %10s %12s\n", "draft_ms", "break_even", "mtp@a tok/s");
    for (const auto& r : out["results"]) {
      std::printf("%-8lld %6lld %10.3f %10.1f %7.1f%% %7.1f%%",
                  static_cast<long long>(r["context"].get<int64_t>()),
                  static_cast<long long>(r["batch"].get<int64_t>()), r["decode_ms"].get<double>(),
                  r["decode_tokens_per_second"].get<double>(),
                  100 * r["decode"]["fraction_of_memory_bound"].get<double>(),
                  100 * r["decode"]["fraction_of_tensor_bound"].get<double>());
      for (const auto& v : r["verify"])
        std::printf("  %11.3f", v["verify_over_decode"].get<double>());
      if (r.contains("draft_ms")) {
        std::printf("%10.3f %10.2f %12.1f", r["draft_ms"].get<double>(),
                    r["break_even_acceptance_length"].get<double>(),
                    r["mtp_projection"]["controlled_tokens_per_second"].get<double>());
      }
      std::printf("\n");
    }
    for (const auto& r : out["results"]) {
      if (!r.contains("mixed_step")) continue;
      const auto& m = r["mixed_step"];
      std::printf(
          "mixed step, context %lld, batch %lld: eager decode %.3f ms, with a %lld-token prefill "
          "chunk %.3f ms (%.2fx; the chunk %.3f ms, %.1f tok/s)\n",
          static_cast<long long>(r["context"].get<int64_t>()),
          static_cast<long long>(r["batch"].get<int64_t>()), m["decode_eager_ms"].get<double>(),
          static_cast<long long>(m["prefill_chunk_tokens"].get<int64_t>()),
          m["decode_with_chunk_ms"].get<double>(), m["over_decode"].get<double>(),
          m["chunk_ms"].get<double>(), m["chunk_tokens_per_second"].get<double>());
    }
    if (out.contains("prefill"))
      std::printf("prefill %lld tokens: %.1f tok/s, %.1f TFLOP/s (%.1f%% of peak)\n",
                  static_cast<long long>(out["prefill"]["tokens"].get<int64_t>()),
                  out["prefill"]["tokens_per_second"].get<double>(),
                  out["prefill"]["tflops"].get<double>(),
                  100 * out["prefill"]["fraction_of_peak"].get<double>());
  });
}

}  // namespace tandem::app
