// The batched engine: its pools, buffers, graphs and the requests' lifecycle (the step itself is
// in batch_step.cpp).
#include "engine/batch_engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/clock.h"
#include "kernels/argmax/argmax.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/linear/linear.h"

namespace tandem {

namespace {

// Prefill chunks end at multiples of this (the GDN chunk size; Scheduler).
constexpr int64_t kPrefillGranule = 64;

}  // namespace

BatchEngine::BatchEngine(Qwen35Model& model, std::unique_ptr<Drafter> drafter,
                         BatchEngineOptions opt)
    : model_(model), drafter_(std::move(drafter)), opt_(opt), k_max_(opt.num_speculative_tokens) {
  TANDEM_CHECK(k_max_ >= 0 && k_max_ <= 8, "--num-speculative-tokens must be in [0, 8], got {}",
               k_max_);
  TANDEM_CHECK(k_max_ == 0 || drafter_ != nullptr, "speculative decoding with k={} needs a drafter",
               k_max_);
  TANDEM_CHECK(opt_.max_num_seqs >= 1, "--max-num-seqs must be at least 1, got {}",
               opt_.max_num_seqs);
  TANDEM_CHECK(opt_.max_model_len >= 2, "--max-model-len must be at least 2, got {}",
               opt_.max_model_len);
  const int64_t step_rows = k_max_ + 1;
  if (opt_.max_num_batched_tokens == 0) opt_.max_num_batched_tokens = model.max_step_rows();
  TANDEM_CHECK(opt_.max_num_batched_tokens <= model.max_step_rows(),
               "--max-num-batched-tokens {} exceeds the model's step buffer of {} rows",
               opt_.max_num_batched_tokens, model.max_step_rows());
  TANDEM_CHECK(opt_.max_num_seqs * step_rows <= opt_.max_num_batched_tokens,
               "--max-num-seqs {} x {} rows (1 + --num-speculative-tokens) exceed "
               "--max-num-batched-tokens {}",
               opt_.max_num_seqs, step_rows, opt_.max_num_batched_tokens);
  const Device device = model.context().device;
  const DType act = model.act_dtype();
  CacheConfig cc{.block_size = opt_.block_size,
                 .num_blocks = opt_.kv_blocks,
                 .num_slots = opt_.max_num_seqs,
                 .step_rows = step_rows,
                 .max_model_len = opt_.max_model_len,
                 .with_mtp = model.has_mtp()};
  const int64_t table_width = cc.table_width();  // the pool's attention workspace agrees
  // Logits rows: every decoding sequence's 1 + k, each prefill chunk's last, and one granule of
  // prompt rows whose every logits row is read (Request::prompt_logprobs).
  const int64_t max_logit_rows = opt_.max_num_seqs * (step_rows + 1) + kPrefillGranule;
  if (cc.num_blocks == 0) {
    if (device == Device::kCpu) {
      cc.num_blocks = opt_.max_num_seqs * table_width;
    } else {
      // What the engine allocates besides the pools: logits and the step buffers.
      const int64_t other = max_logit_rows * model.config().vocab_size * 4 + (64 << 20);
      const DeviceMemoryInfo mem = device_memory_info(device);
      const auto budget =
          static_cast<int64_t>(static_cast<double>(mem.free_bytes) * opt_.gpu_memory_utilization) -
          other;
      cc = fit_cache_to_budget(model.config(), cc, act, budget);
    }
  }
  TANDEM_CHECK(cc.num_blocks >= cc.max_blocks_per_seq(),
               "--kv-blocks {} cannot hold one sequence of --max-model-len {} ({} blocks of {})",
               cc.num_blocks, cc.max_model_len, cc.max_blocks_per_seq(), cc.block_size);
  pool_ = std::make_unique<StatePool>(model.config(), cc, model.context(), act,
                                      opt_.max_num_seqs * step_rows);
  prefix_ = std::make_unique<PrefixCache>(opt_.prefix_cache_bytes, kPrefillGranule);
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerConfig{.max_num_seqs = opt_.max_num_seqs,
                      .max_num_batched_tokens = opt_.max_num_batched_tokens,
                      .max_model_len = opt_.max_model_len,
                      .granule = kPrefillGranule,
                      .prompt_logit_rows = kPrefillGranule},
      *pool_, prefix_.get());
  buffers_ = std::make_unique<StepBuffers>(model.max_step_rows(), opt_.max_num_seqs, table_width,
                                           cc.block_size, pool_->scratch_block(),
                                           pool_->scratch_slot(), device);
  logits_ = Tensor::zeros({max_logit_rows, model.config().vocab_size}, DType::kF32, device);
  argmax_ids_ = Tensor::zeros({max_logit_rows}, DType::kI32, device);
  // Graph buckets: 1, 2, 4, 8, then every 8 sequences (a step pads to the next bucket, and padded
  // rows still cost the row-wise kernels: a decode-linear group reads every weight again).
  for (int64_t b = 1; b < std::min<int64_t>(opt_.max_num_seqs, 8); b *= 2) buckets_.push_back(b);
  for (int64_t b = 8; b < opt_.max_num_seqs; b += 8) buckets_.push_back(b);
  buckets_.push_back(opt_.max_num_seqs);
  counters_.accepted_per_position.assign(k_max_, 0);
  counters_.decode_steps_per_k.assign(k_max_ + 1, 0);
  const bool graphs = opt_.cuda_graphs && device == Device::kCuda && !model.has_observer();
  if (drafter_) {
    drafter_->prepare(DrafterSetup{.cache = &pool_->views(),
                                   .block_size = cc.block_size,
                                   .table_width = table_width,
                                   .scratch_block = pool_->scratch_block(),
                                   .scratch_slot = pool_->scratch_slot(),
                                   .max_seqs = opt_.max_num_seqs,
                                   .k_max = k_max_,
                                   .cuda_graphs = graphs});
  }
  if (graphs) capture_graphs();
}

BatchEngine::~BatchEngine() = default;

int64_t BatchEngine::bucket_of(int64_t n) const {
  for (int64_t b : buckets_)
    if (b >= n) return b;
  return buckets_.back();
}

void BatchEngine::capture_graphs() {
  // One graph per (batch bucket, drafts per sequence): the target forward and the argmax of every
  // row. Capture records launches only; each replay reads the metadata planned into the same
  // buffers (padding sequences point at the scratch slot and block).
  void* stream = model_.context().cuda_stream;
  auto plan = [&](int64_t b, int k) {  // b padding sequences: the scratch slot and block
    const std::vector<PlannedSeq> planned(b, PlannedSeq{.decode = true, .logits = LogitRows::kAll});
    return buffers_->plan(planned, {.rows = b * (k + 1), .max_decode_rows = k + 1});
  };
  auto run = [&](const StepPlan& p) {
    const int64_t rows = p.batch.n_rows;
    model_.forward(p.batch, pool_->views(), logits_.slice(0, 0, rows));
    kernels::argmax({logits_.slice(0, 0, rows), argmax_ids_.slice(0, 0, rows)}, model_.context());
  };
  // Eager steps first, so that every kernel configuration's one-time set-up (occupancy queries,
  // shared-memory attributes) runs outside a capture: each depth at the smallest buckets (the
  // linear's 1-4, 8 and 16-row configurations) and at the largest (its 32-row one).
  for (int64_t b : buckets_) {
    if (b > 4 && b != buckets_.back()) continue;
    for (int k = 0; k <= k_max_; ++k) {
      if (b * (k + 1) <= opt_.max_num_batched_tokens) run(plan(b, k));
    }
  }
  device_synchronize(Device::kCuda);
  for (int64_t b : buckets_) {
    for (int k = 0; k <= k_max_; ++k) {
      if (b * (k + 1) > opt_.max_num_batched_tokens) continue;
      const StepPlan p = plan(b, k);  // the metadata upload stays outside the capture
      auto g = std::make_unique<CudaGraph>();
      g->begin_capture(stream);
      try {
        run(p);
      } catch (...) {  // end the capture, so that the stream is usable and the error surfaces
        CudaGraph::abort_capture(stream);
        throw;
      }
      g->end_capture(stream);
      graphs_[{b, k}] = std::move(g);
    }
  }
}

std::string BatchEngine::describe() const {
  std::string s = describe_cache(model_.config(), pool_->config(), model_.act_dtype());
  s += fmt::format(
      "\nengine: --max-num-seqs {}, --max-num-batched-tokens {}, --max-model-len {}, "
      "speculation k={} ({}), decode steps: {}",
      opt_.max_num_seqs, opt_.max_num_batched_tokens, opt_.max_model_len, k_max_,
      opt_.control == ControlMode::kAdaptive ? "adaptive" : "fixed",
      graphs_.empty() ? std::string("eager launches")
                      : fmt::format("{} CUDA graphs (batch buckets up to {} x k = 0..{})",
                                    graphs_.size(), buckets_.back(), k_max_));
  s += '\n';
  s += kernels::linear_paths(model_.context().device);
  const ModelConfig& cfg = model_.config();
  if (cfg.gdn_d_k > 0) {
    s += '\n';
    s += kernels::gated_delta_rule_paths(model_.context().device, cfg.gdn_d_k, cfg.gdn_d_v);
  }
  return s;
}

Sequence& BatchEngine::seq(RequestId id) {
  auto it = seqs_.find(id);
  TANDEM_CHECK(it != seqs_.end(), "unknown request {}", id);
  return *it->second;
}
const Sequence& BatchEngine::seq(RequestId id) const {
  auto it = seqs_.find(id);
  TANDEM_CHECK(it != seqs_.end(), "unknown request {}", id);
  return *it->second;
}
const GenerationStats& BatchEngine::stats(RequestId id) const { return seq(id).stats; }
const std::vector<int32_t>& BatchEngine::generated(RequestId id) const { return seq(id).generated; }
const SequenceCache& BatchEngine::cache(RequestId id) const { return seq(id).cache; }

RequestId BatchEngine::add(Request req) {
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  const int64_t vocab = model_.config().vocab_size;
  TANDEM_CHECK(n >= 1, "the prompt is empty");
  for (int32_t id : req.prompt)
    TANDEM_CHECK(id >= 0 && id < vocab, "prompt token id {} is outside the vocabulary [0, {})", id,
                 vocab);
  TANDEM_CHECK(n + 1 <= opt_.max_model_len,
               "the prompt has {} tokens but the model length is {} (raise --max-model-len)", n,
               opt_.max_model_len);
  TANDEM_CHECK(req.max_tokens >= 1, "max_tokens must be >= 1, got {}", req.max_tokens);
  check_sampling_params(req.sampling);
  TANDEM_CHECK(req.logprobs >= -1 && req.logprobs <= kMaxTopLogprobs,
               "logprobs must be -1 (off) or 0..{} top tokens, got {}", kMaxTopLogprobs,
               req.logprobs);
  TANDEM_CHECK(req.prompt_logprobs >= -1 && req.prompt_logprobs <= kMaxTopLogprobs,
               "prompt_logprobs must be -1 (off) or 0..{} top tokens, got {}", kMaxTopLogprobs,
               req.prompt_logprobs);
  auto s = std::make_unique<Sequence>();
  if (req.sampling.adjusts_logits()) {
    s->penalties = PenaltyState(req.sampling, req.prompt, req.stop_ids);
  }
  if (req.json_object) {
    TANDEM_CHECK(opt_.token_bytes != nullptr,
                 "JSON mode needs the tokenizer's token texts (BatchEngineOptions::token_bytes)");
    s->json.emplace(opt_.token_bytes, req.stop_ids, req.json_after_think, req.json_schema);
  }
  s->id = next_id_++;
  s->order = next_order_++;
  s->req = std::move(req);
  s->stats.prompt_tokens = n;
  s->stats.accepted_per_position.assign(k_max_, 0);
  s->stats.steps_per_k.assign(k_max_ + 1, 0);
  s->admitted_at = monotonic_seconds();
  Sequence* raw = s.get();
  seqs_[raw->id] = std::move(s);
  scheduler_->add(raw);
  return raw->id;
}

void BatchEngine::finish(Sequence& s, const std::string& reason) {
  s.finish_reason = reason;
  scheduler_->remove(&s);
  if (drafter_ && s.drafting) drafter_->end_sequence(s.id);
  s.drafting = false;
  s.stats.generated_tokens = static_cast<int64_t>(s.generated.size());
  const double t = monotonic_seconds();
  s.stats.decode_seconds = s.first_token_at > 0 ? t - s.first_token_at : 0.0;
  s.stats.prefill_seconds = s.first_token_at > 0 ? s.first_token_at - s.admitted_at : 0.0;
}

void BatchEngine::cancel(RequestId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second->phase == Phase::kFinished) return;
  finish(*it->second, "cancelled");
  pending_.push_back(
      {.id = id, .finished = true, .finish_reason = "cancelled", .stats = it->second->stats});
  if (!opt_.keep_finished) seqs_.erase(it);
}

std::vector<GenerateResult> BatchEngine::run(std::vector<Request> reqs) {
  std::vector<RequestId> ids;
  for (Request& r : reqs) ids.push_back(add(std::move(r)));
  while (!idle()) step();
  std::vector<GenerateResult> results;
  for (RequestId id : ids) {
    Sequence& s = seq(id);
    results.push_back({s.generated, s.stats, s.finish_reason});
    seqs_.erase(id);
  }
  return results;
}

Tensor BatchEngine::score(const std::vector<int32_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size()), vocab = model_.config().vocab_size;
  TANDEM_CHECK(n >= 1, "the prompt is empty");
  for (int32_t id : ids)
    TANDEM_CHECK(id >= 0 && id < vocab, "prompt token id {} is outside the vocabulary [0, {})", id,
                 vocab);
  TANDEM_CHECK(n <= opt_.max_model_len,
               "the prompt has {} tokens but the model length is {} (raise --max-model-len)", n,
               opt_.max_model_len);
  SequenceCache cache;
  TANDEM_CHECK(pool_->acquire(cache), "score: no free sequence slot");
  Tensor out = Tensor::zeros({n, vocab}, DType::kF32);
  const int64_t chunk = std::max<int64_t>(opt_.max_num_batched_tokens / 64 * 64, 64);
  Tensor chunk_logits = Tensor::zeros({std::min(chunk, n), vocab}, DType::kF32, pool_->device());
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t rows = std::min(chunk, n - s);
    TANDEM_CHECK(pool_->reserve(cache, s + rows), "score: the pool has too few KV blocks");
    const PlannedSeq q{.cache = &cache,
                       .tokens = std::span<const int32_t>(ids.data() + s, rows),
                       .rows = rows,
                       .start = s,
                       .decode = false,
                       .logits = LogitRows::kAll};
    const StepPlan plan = buffers_->plan(std::span<const PlannedSeq>(&q, 1));
    model_.forward(plan.batch, pool_->views(), chunk_logits.slice(0, 0, rows));
    out.slice(0, s, s + rows).copy_from(chunk_logits.slice(0, 0, rows).host());
    cache.commit_prefill(rows);
  }
  pool_->release(cache);
  return out;
}

}  // namespace tandem
