// The batched engine's step: schedule, draft, plan, run, accept, commit, emit.
#include "engine/batch_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "kernels/argmax/argmax.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/linear/linear.h"
#include "spec/acceptance.h"

namespace tandem {

namespace {

// Prefill chunks end at multiples of this (the GDN chunk size; Scheduler).
constexpr int64_t kPrefillGranule = 64;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The catch-up budget's rows for each of n sequences (BatchEngineOptions::catch_up_rows).
int64_t catch_up_rows_per_seq(const BatchEngineOptions& o, int64_t n) {
  return std::max<int64_t>(o.catch_up_min_rows, o.catch_up_rows / n);
}

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
  s += "\n" + kernels::linear_paths(model_.context().device);
  const ModelConfig& cfg = model_.config();
  if (cfg.gdn_d_k > 0) {
    s += "\n" + kernels::gated_delta_rule_paths(model_.context().device, cfg.gdn_d_k, cfg.gdn_d_v);
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
  s->admitted_at = now_seconds();
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
  const double t = now_seconds();
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

bool BatchEngine::emit(Sequence& s, std::span<const int32_t> tokens, RequestOutput& o,
                       std::vector<TokenLogprobs> lps) {
  auto finished = [&] {
    for (int32_t tok : tokens) {
      s.generated.push_back(tok);
      o.new_tokens.push_back(tok);
      if (s.req.sampling.adjusts_logits()) s.penalties.add(tok);
      if (s.json) s.json->add(tok);
      ++counters_.generation_tokens;
      const auto& stop = s.req.stop_ids;
      if (std::find(stop.begin(), stop.end(), tok) != stop.end()) {
        o.finish_reason = "stop";
        return true;
      }
      if (static_cast<int64_t>(s.generated.size()) >= s.req.max_tokens) {
        o.finish_reason = "length";
        return true;
      }
    }
    if (s.cache.n_past >= opt_.max_model_len) {  // no position left for the next token's row
      o.finish_reason = "length";
      return true;
    }
    return false;
  }();
  if (s.req.logprobs >= 0) {
    lps.resize(o.new_tokens.size());
    o.logprobs = std::move(lps);
  }
  return finished;
}

int32_t BatchEngine::choose_on_host(const Sequence& s, const float* row,
                                    std::span<const int32_t> pending, int64_t position,
                                    int32_t device_argmax, std::vector<TokenLogprobs>& lps) {
  const int64_t vocab = model_.config().vocab_size;
  const SamplingParams& p = s.req.sampling;
  const float* chosen_from = row;
  const bool adjusted = p.adjusts_logits() || s.json.has_value();
  if (adjusted) {
    scratch_.assign(row, row + vocab);
    if (p.adjusts_logits()) s.penalties.apply(scratch_.data(), vocab, pending);
    if (s.json) s.json->apply(scratch_.data(), vocab, pending);
    chosen_from = scratch_.data();
  }
  const int32_t tok =
      !p.greedy() ? draw(target_distribution(chosen_from, vocab, p), uniform_at(p.seed, position))
      : adjusted  ? kernels::ref::argmax_row(chosen_from, vocab)
                  : device_argmax;  // the unadjusted row's argmax, computed on the device
  if (s.req.logprobs >= 0) lps.push_back(token_logprobs(row, vocab, tok, s.req.logprobs));
  return tok;
}

void BatchEngine::keep_prefix(const Sequence& s) {
  const int64_t at = prefix_->snapshot_length(s.prompt_len());
  if (at == 0 || s.prefilled != at) return;
  const auto prefix = std::span<const int32_t>(s.req.prompt).first(static_cast<size_t>(at));
  if (prefix_->contains(prefix)) return;
  device_synchronize(pool_->device());  // the step that wrote the state has finished
  prefix_->insert(prefix, pool_->snapshot(s.cache, at));
  ++counters_.prefixes_kept;
}

std::vector<RequestOutput> BatchEngine::step() {
  std::vector<RequestOutput> out = std::move(pending_);
  pending_.clear();
  const double t0 = now_seconds();
  const int64_t n_decoding = scheduler_->decoding();
  SpeculationControl* control = nullptr;  // the controller of this batch size: chooses, records
  int k_step = 0;
  // Adaptive control drafts in pure decode steps only: a step with prefill rows runs eagerly, and
  // its verify rows take token budget from the prompts, so drafting there made more (eager) mixed
  // steps; on the H200 that cost the shipped model 13% against plain at 64 sequences.
  const bool drafts_allowed = opt_.control == ControlMode::kFixed || !scheduler_->prefill_pending();
  if (k_max_ > 0 && n_decoding > 0 && drafts_allowed) {
    control = &control_.try_emplace(bucket_of(n_decoding), k_max_, opt_.control).first->second;
    k_step = control->choose();
  }
  ScheduledStep sched = scheduler_->schedule(1 + k_step);
  counters_.preemptions += static_cast<int64_t>(sched.preempted.size());
  if (sched.empty()) {
    TANDEM_CHECK(scheduler_->idle(),
                 "the engine cannot make progress: {} requests wait but none fits the pools",
                 scheduler_->waiting());
    return out;
  }
  const int64_t n_decode = static_cast<int64_t>(sched.decode.size());
  const int64_t bucket = bucket_of(std::max<int64_t>(n_decode, 1));
  for (const PrefillChunk& c : sched.prefill) {  // admitted now: the drafter follows them
    if (drafter_ && !c.seq->drafting) {
      drafter_->begin_sequence(c.seq->id);
      c.seq->drafting = true;
    }
  }

  // Drafts: 0..k_step per sequence (fewer where the model length leaves no room).
  std::vector<std::vector<int32_t>> drafts(n_decode);
  double catch_up_seconds = 0.0;
  if (k_step > 0) {
    std::vector<DraftAsk> asks;
    std::vector<int64_t> ask_of;
    std::vector<SeqId> ids;
    for (int64_t i = 0; i < n_decode; ++i) {
      Sequence& s = *sched.decode[i];
      const int64_t room = opt_.max_model_len - 1 - s.cache.n_past;
      const int cap = s.req.max_draft_tokens >= 0 ? s.req.max_draft_tokens : k_step;
      const int k = static_cast<int>(std::clamp<int64_t>(room, 0, std::min(k_step, cap)));
      if (k == 0) continue;
      asks.push_back({s.id, &s.cache, k, s.generated});
      ask_of.push_back(i);
      ids.push_back(s.id);
    }
    if (!asks.empty()) {
      if (prev_k_ == 0) {
        const double c0 = now_seconds();
        // The last step's rows are this step's own pass; the older ones within the catch-up
        // budget (BatchEngineOptions::catch_up_rows).
        drafter_->catch_up(ids, /*keep_rows=*/1, catch_up_rows_per_seq(opt_, std::ssize(ids)));
        ++counters_.catch_ups;
        catch_up_seconds = now_seconds() - c0;
      }
      const double d0 = now_seconds();
      std::vector<std::vector<int32_t>> got = drafter_->propose(asks);
      counters_.draft_seconds += now_seconds() - d0;
      counters_.catch_up_seconds += catch_up_seconds;
      for (size_t a = 0; a < asks.size(); ++a) {
        got[a].resize(std::min<size_t>(got[a].size(), static_cast<size_t>(asks[a].k)));
        drafts[ask_of[a]] = std::move(got[a]);
      }
    }
  }
  if (n_decode > 0) {
    prev_k_ = k_step;
    ++counters_.decode_steps_per_k[k_step];
    counters_.mixed_steps += !sched.prefill.empty();
  }

  // The step's layout: decoding sequences (padded to the bucket's shape when a graph replays:
  // padding sequences without rows, orphan rows at the end), then prefill chunks.
  const bool pure_decode = sched.prefill.empty();
  const auto graph = graphs_.find({bucket, k_step});
  const bool use_graph = pure_decode && graph != graphs_.end() && !model_.has_observer();
  std::vector<std::vector<int32_t>> rows_tokens(n_decode);
  std::vector<PlannedSeq> planned;
  std::vector<RequestId> planned_ids;
  for (int64_t i = 0; i < n_decode; ++i) {
    Sequence& s = *sched.decode[i];
    rows_tokens[i].push_back(s.last);
    rows_tokens[i].insert(rows_tokens[i].end(), drafts[i].begin(), drafts[i].end());
    planned.push_back({.cache = &s.cache,
                       .tokens = rows_tokens[i],
                       .rows = static_cast<int64_t>(rows_tokens[i].size()),
                       .start = s.cache.n_past,
                       .decode = true,
                       .logits = LogitRows::kAll});
    planned_ids.push_back(s.id);
  }
  for (int64_t i = n_decode; use_graph && i < bucket; ++i) {
    planned.push_back({.decode = true, .logits = LogitRows::kAll});
    planned_ids.push_back(-1);
  }
  const int64_t first_chunk = static_cast<int64_t>(planned.size());
  for (const PrefillChunk& c : sched.prefill) {
    planned.push_back(
        {.cache = &c.seq->cache,
         .tokens = std::span<const int32_t>(c.seq->req.prompt.data() + c.start, c.rows),
         .rows = c.rows,
         .start = c.start,
         .decode = false,
         .logits = c.seq->req.prompt_logprobs >= 0 ? LogitRows::kAll
                   : c.last()                      ? LogitRows::kLast
                                                   : LogitRows::kNone});
    planned_ids.push_back(c.seq->id);
  }
  const StepPlan plan =
      use_graph
          ? buffers_->plan(planned, {.rows = bucket * (1 + k_step), .max_decode_rows = 1 + k_step})
          : buffers_->plan(planned);
  if (before_step) before_step(plan, planned_ids);

  // Run.
  const int64_t n_logit = plan.batch.n_logit_rows;
  const Tensor logits = logits_.slice(0, 0, n_logit);
  if (use_graph) {
    graph->second->launch(model_.context().cuda_stream);
    ++counters_.graph_steps;
  } else {
    model_.forward(plan.batch, pool_->views(), logits);
    if (n_logit > 0) kernels::argmax({logits, argmax_ids_.slice(0, 0, n_logit)}, model_.context());
  }
  ++counters_.steps;
  const Tensor ids_t = n_logit > 0 ? argmax_ids_.slice(0, 0, n_logit).host() : Tensor();
  const int32_t* ids = n_logit > 0 ? ids_t.data<const int32_t>() : nullptr;
  // Sampled sequences read their own logits rows on the host; greedy ones only the argmax ids.
  auto host_rows = [&](int64_t begin, int64_t end) { return logits.slice(0, begin, end).host(); };

  // Acceptance and commit.
  std::vector<std::vector<int32_t>> next_tokens(planned.size());
  std::vector<TargetRows> target_rows;
  std::vector<int> n_accs;
  std::vector<RequestOutput> step_out;
  for (int64_t i = 0; i < n_decode; ++i) {
    Sequence& s = *sched.decode[i];
    const int k = static_cast<int>(drafts[i].size());
    const int64_t lr = plan.logit_start[i];
    std::vector<TokenLogprobs> lps;
    Verdict v;
    if (!s.needs_host_logits()) {
      v = accept_greedy(std::span<const int32_t>(ids + lr, k + 1), drafts[i]);
    } else {
      const Tensor rows = host_rows(lr, lr + k + 1);
      const std::span<const int32_t> d = drafts[i];
      v = accept_each(d, [&](int j) {
        return choose_on_host(s, rows.data<const float>() + j * rows.stride(0), d.first(j),
                              s.cache.n_past + 1 + j, ids[lr + j], lps);
      });
    }
    const int64_t start = s.cache.n_past;
    s.cache.commit_verify(v.n_acc);  // the commit: one integer
    GenerationStats& st = s.stats;
    ++st.steps;
    ++st.steps_per_k[k];
    if (k > 0) {
      ++st.drafting_steps;
      st.draft_tokens += k;
      st.accepted_tokens += v.n_acc - 1;
      ++counters_.drafting_steps;
      counters_.draft_tokens += k;
      counters_.accepted_tokens += v.n_acc - 1;
      for (int j = 0; j < v.n_acc - 1; ++j) {
        ++st.accepted_per_position[j];
        ++counters_.accepted_per_position[j];
      }
    }
    if (k == k_step) n_accs.push_back(v.n_acc);
    if (opt_.trace) {
      *opt_.trace << nlohmann::json{{"step", st.steps - 1},      {"request", s.id},
                                    {"position", start - 1},     {"drafts", drafts[i]},
                                    {"target", v.target_tokens}, {"n_acc", v.n_acc},
                                    {"batch", n_decode},         {"seconds", now_seconds() - t0}}
                         .dump()
                  << "\n";
    }
    next_tokens[i] = v.emitted;
    target_rows.push_back({s.id, &s.cache, plan.row_start[i], start, next_tokens[i]});
    if (after_commit) after_commit(s.id, st.steps - 1, s.cache.n_past);
    RequestOutput o{.id = s.id};
    const bool done = emit(s, v.emitted, o, std::move(lps));
    s.last = v.emitted.back();
    o.finished = done;
    step_out.push_back(std::move(o));
  }
  for (size_t c = 0; c < sched.prefill.size(); ++c) {
    const PrefillChunk& ch = sched.prefill[c];
    Sequence& s = *ch.seq;
    const int64_t p = first_chunk + static_cast<int64_t>(c);
    if (ch.start > 0 && ch.start == s.stats.cached_tokens) {  // the first chunk after a restore
      ++counters_.prefix_hits;
      counters_.cached_prompt_tokens += ch.start;
    }
    s.cache.commit_prefill(ch.rows);
    s.prefilled += ch.rows;
    counters_.prompt_tokens += ch.rows;
    keep_prefix(s);
    const auto& prompt = s.req.prompt;
    std::vector<int32_t>& next = next_tokens[p];
    next.assign(prompt.begin() + ch.start + 1, prompt.begin() + ch.start + ch.rows);
    const bool all_rows = s.req.prompt_logprobs >= 0;
    if (all_rows) {  // row j's logits score prompt token start + j + 1 (teacher forcing)
      const int64_t scored = std::min(ch.rows, s.prompt_len() - 1 - ch.start);
      if (scored > 0) {
        const int64_t lr0 = plan.logit_start[p], vocab = model_.config().vocab_size;
        const Tensor rows = host_rows(lr0, lr0 + scored);
        for (int64_t j = 0; j < scored; ++j) {
          s.prompt_logprobs.push_back(token_logprobs(rows.data<const float>() + j * rows.stride(0),
                                                     vocab, prompt[ch.start + j + 1],
                                                     s.req.prompt_logprobs));
        }
      }
    }
    if (ch.last()) {
      const int64_t lr = plan.logit_start[p] + (all_rows ? ch.rows - 1 : 0);
      std::vector<TokenLogprobs> lps;
      const int32_t first = !s.needs_host_logits()
                                ? ids[lr]
                                : choose_on_host(s, host_rows(lr, lr + 1).data<const float>(), {},
                                                 s.prompt_len(), ids[lr], lps);
      next.push_back(first);
      s.phase = Phase::kDecode;
      s.last = first;
      s.first_token_at = now_seconds();
      if (after_commit) after_commit(s.id, -1, s.cache.n_past);
      RequestOutput o{.id = s.id};
      o.prompt_logprobs = std::move(s.prompt_logprobs);
      o.finished = emit(s, std::span<const int32_t>(&first, 1), o, std::move(lps));
      step_out.push_back(std::move(o));
    } else {
      next.push_back(prompt[ch.start + ch.rows]);
    }
    target_rows.push_back({s.id, &s.cache, plan.row_start[p], ch.start, next});
  }
  if (drafter_ && k_step == 0 && n_decode > 0) {
    // At a sequence's first decode step and every kTrimEvery after, in k = 0 steps: its deferred
    // rows that the next catch-up would drop anyway are dropped now, so that its prompt and a run
    // of k = 0 steps do not overflow the drafter's queue into a first pass over them (on this CPU
    // at 8 sequences such passes cost 6% of a run that control kept plain). A catch-up then
    // passes the most recent rows within its budget, as after any run of k = 0 steps; older rows
    // are lost to the drafter's context, never to an output (drafts decide only speed).
    constexpr int64_t kTrimEvery = 8;
    std::vector<SeqId> ids;
    for (const Sequence* s : sched.decode)
      if (s->stats.steps % kTrimEvery == 1) ids.push_back(s->id);
    if (!ids.empty()) drafter_->catch_up(ids, catch_up_rows_per_seq(opt_, n_decode), 0);
  }
  if (drafter_) drafter_->after_target_step(target_rows);
  counters_.step_seconds += now_seconds() - t0;
  if (pure_decode && control != nullptr && n_decode > 0) {
    control->record_batch(k_step, n_accs, now_seconds() - t0, catch_up_seconds);
  }
  for (RequestOutput& o : step_out) {
    if (o.finished) {
      Sequence& s = seq(o.id);
      finish(s, o.finish_reason);
      o.stats = s.stats;
      if (!opt_.keep_finished) seqs_.erase(o.id);
    }
    out.push_back(std::move(o));
  }
  return out;
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
