// The batched engine's step, phase by phase: schedule, draft, lay out, run, accept and commit each
// decoding sequence, commit each prefill chunk, emit. (Construction, graphs and the request
// lifecycle are in batch_engine.cpp.)
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "engine/batch_engine.h"
#include "kernels/argmax/argmax.h"
#include "spec/acceptance.h"

namespace tandem {

namespace {

// The catch-up budget's rows for each of n sequences (BatchEngineOptions::catch_up_rows).
int64_t catch_up_rows_per_seq(const BatchEngineOptions& o, int64_t n) {
  return std::max<int64_t>(o.catch_up_min_rows, o.catch_up_rows / n);
}

}  // namespace

// One step's working set, filled phase by phase.
struct BatchEngine::StepRun {
  double t0 = 0.0;
  ScheduledStep sched;
  int k_step = 0;
  int64_t n_decode = 0;
  int64_t bucket = 0;
  bool pure_decode = false;
  CudaGraph* graph = nullptr;  // the step's captured graph, or null: eager launches
  double catch_up_seconds = 0.0;
  std::vector<std::vector<int32_t>> drafts;       // [n_decode]
  std::vector<std::vector<int32_t>> rows_tokens;  // [n_decode]: last token, then the drafts
  std::vector<PlannedSeq> planned;  // decoding sequences (and padding), then prefill chunks
  std::vector<RequestId> planned_ids;
  int64_t first_chunk = 0;  // planned index of the first prefill chunk
  StepPlan plan;
  Tensor logits;  // the step's logits rows on the model's device
  Tensor ids_t;   // their argmax ids on the host
  const int32_t* ids = nullptr;
  std::vector<std::vector<int32_t>> next_tokens;  // [planned]: the drafter's inputs per row
  std::vector<TargetRows> target_rows;
  std::vector<int> n_accs;  // acceptance lengths of the sequences that drafted k_step
  std::vector<RequestOutput> out;

  Tensor host_rows(int64_t begin, int64_t end) const { return logits.slice(0, begin, end).host(); }
};

std::vector<RequestOutput> BatchEngine::step() {
  std::vector<RequestOutput> out = std::move(pending_);
  pending_.clear();
  StepRun r;
  r.t0 = monotonic_seconds();
  const int64_t n_decoding = scheduler_->decoding();
  SpeculationControl* control = nullptr;  // the controller of this batch size: chooses, records
  // Adaptive control drafts in pure decode steps only: a step with prefill rows runs eagerly, and
  // its verify rows take token budget from the prompts, so drafting there made more (eager) mixed
  // steps; on the H200 that cost the shipped model 13% against plain at 64 sequences.
  const bool drafts_allowed = opt_.control == ControlMode::kFixed || !scheduler_->prefill_pending();
  if (k_max_ > 0 && n_decoding > 0 && drafts_allowed) {
    control = &control_.try_emplace(bucket_of(n_decoding), k_max_, opt_.control).first->second;
    r.k_step = control->choose();
  }
  r.sched = scheduler_->schedule(1 + r.k_step);
  counters_.preemptions += static_cast<int64_t>(r.sched.preempted.size());
  if (r.sched.empty()) {
    TANDEM_CHECK(scheduler_->idle(),
                 "the engine cannot make progress: {} requests wait but none fits the pools",
                 scheduler_->waiting());
    return out;
  }
  r.n_decode = static_cast<int64_t>(r.sched.decode.size());
  r.bucket = bucket_of(std::max<int64_t>(r.n_decode, 1));
  for (const PrefillChunk& c : r.sched.prefill) {  // admitted now: the drafter follows them
    if (drafter_ && !c.seq->drafting) {
      drafter_->begin_sequence(c.seq->id);
      c.seq->drafting = true;
    }
  }
  propose_drafts(r);
  if (r.n_decode > 0) {
    prev_k_ = r.k_step;
    ++counters_.decode_steps_per_k[r.k_step];
    counters_.mixed_steps += !r.sched.prefill.empty();
  }
  lay_out(r);
  run_model(r);
  r.next_tokens.resize(r.planned.size());
  for (int64_t i = 0; i < r.n_decode; ++i) accept_and_commit(r, i);
  for (size_t c = 0; c < r.sched.prefill.size(); ++c) commit_chunk(r, c);
  if (drafter_ && r.k_step == 0 && r.n_decode > 0) trim_drafter_rows(r);
  if (drafter_) drafter_->after_target_step(r.target_rows);
  counters_.step_seconds += monotonic_seconds() - r.t0;
  if (r.pure_decode && control != nullptr && r.n_decode > 0) {
    control->record_batch(r.k_step, r.n_accs, monotonic_seconds() - r.t0, r.catch_up_seconds);
  }
  for (RequestOutput& o : r.out) {
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

// Drafts: 0..k_step per decoding sequence (fewer where the model length or the request's cap
// leaves less room).
void BatchEngine::propose_drafts(StepRun& r) {
  r.drafts.assign(r.n_decode, {});
  if (r.k_step == 0) return;
  std::vector<DraftAsk> asks;
  std::vector<int64_t> ask_of;
  std::vector<SeqId> ids;
  for (int64_t i = 0; i < r.n_decode; ++i) {
    Sequence& s = *r.sched.decode[i];
    const int64_t room = opt_.max_model_len - 1 - s.cache.n_past;
    const int cap = s.req.max_draft_tokens >= 0 ? s.req.max_draft_tokens : r.k_step;
    const int k = static_cast<int>(std::clamp<int64_t>(room, 0, std::min(r.k_step, cap)));
    if (k == 0) continue;
    asks.push_back({s.id, &s.cache, k, s.generated});
    ask_of.push_back(i);
    ids.push_back(s.id);
  }
  if (asks.empty()) return;
  if (prev_k_ == 0) {
    const double c0 = monotonic_seconds();
    // The last step's rows are this step's own pass; the older ones within the catch-up budget
    // (BatchEngineOptions::catch_up_rows).
    drafter_->catch_up(ids, /*keep_rows=*/1, catch_up_rows_per_seq(opt_, std::ssize(ids)));
    ++counters_.catch_ups;
    r.catch_up_seconds = monotonic_seconds() - c0;
  }
  const double d0 = monotonic_seconds();
  std::vector<std::vector<int32_t>> got = drafter_->propose(asks);
  counters_.draft_seconds += monotonic_seconds() - d0;
  counters_.catch_up_seconds += r.catch_up_seconds;
  for (size_t a = 0; a < asks.size(); ++a) {
    got[a].resize(std::min<size_t>(got[a].size(), static_cast<size_t>(asks[a].k)));
    r.drafts[ask_of[a]] = std::move(got[a]);
  }
}

// The step's layout: decoding sequences (padded to the bucket's shape when a graph replays:
// padding sequences without rows, orphan rows at the end), then prefill chunks.
void BatchEngine::lay_out(StepRun& r) {
  r.pure_decode = r.sched.prefill.empty();
  const auto graph = graphs_.find({r.bucket, r.k_step});
  if (r.pure_decode && graph != graphs_.end() && !model_.has_observer())
    r.graph = graph->second.get();
  r.rows_tokens.resize(r.n_decode);
  for (int64_t i = 0; i < r.n_decode; ++i) {
    Sequence& s = *r.sched.decode[i];
    r.rows_tokens[i].push_back(s.last);
    r.rows_tokens[i].insert(r.rows_tokens[i].end(), r.drafts[i].begin(), r.drafts[i].end());
    r.planned.push_back({.cache = &s.cache,
                         .tokens = r.rows_tokens[i],
                         .rows = static_cast<int64_t>(r.rows_tokens[i].size()),
                         .start = s.cache.n_past,
                         .decode = true,
                         .logits = LogitRows::kAll});
    r.planned_ids.push_back(s.id);
  }
  for (int64_t i = r.n_decode; r.graph != nullptr && i < r.bucket; ++i) {
    r.planned.push_back({.decode = true, .logits = LogitRows::kAll});
    r.planned_ids.push_back(-1);
  }
  r.first_chunk = static_cast<int64_t>(r.planned.size());
  for (const PrefillChunk& c : r.sched.prefill) {
    r.planned.push_back(
        {.cache = &c.seq->cache,
         .tokens = std::span<const int32_t>(c.seq->req.prompt.data() + c.start, c.rows),
         .rows = c.rows,
         .start = c.start,
         .decode = false,
         .logits = c.seq->req.prompt_logprobs >= 0 ? LogitRows::kAll
                   : c.last()                      ? LogitRows::kLast
                                                   : LogitRows::kNone});
    r.planned_ids.push_back(c.seq->id);
  }
  const int64_t step_rows = 1 + r.k_step;
  r.plan =
      r.graph != nullptr
          ? buffers_->plan(r.planned, {.rows = r.bucket * step_rows, .max_decode_rows = step_rows})
          : buffers_->plan(r.planned);
  if (before_step) before_step(r.plan, r.planned_ids);
}

// Runs the step (its graph, or eagerly) and brings the argmax ids to the host. Sampled sequences
// read their own logits rows later (StepRun::host_rows); greedy ones only the ids.
void BatchEngine::run_model(StepRun& r) {
  const int64_t n_logit = r.plan.batch.n_logit_rows;
  r.logits = logits_.slice(0, 0, n_logit);
  if (r.graph != nullptr) {
    r.graph->launch(model_.context().cuda_stream);
    ++counters_.graph_steps;
  } else {
    model_.forward(r.plan.batch, pool_->views(), r.logits);
    if (n_logit > 0)
      kernels::argmax({r.logits, argmax_ids_.slice(0, 0, n_logit)}, model_.context());
  }
  ++counters_.steps;
  if (n_logit > 0) {
    r.ids_t = argmax_ids_.slice(0, 0, n_logit).host();
    r.ids = r.ids_t.data<const int32_t>();
  }
}

// Decoding sequence i: accepts its drafts against the target's tokens, commits (one integer),
// counts and emits.
void BatchEngine::accept_and_commit(StepRun& r, int64_t i) {
  Sequence& s = *r.sched.decode[i];
  const std::vector<int32_t>& drafts = r.drafts[i];
  const int k = static_cast<int>(drafts.size());
  const int64_t lr = r.plan.logit_start[i];
  std::vector<TokenLogprobs> lps;
  Verdict v;
  if (!s.needs_host_logits()) {
    v = accept_greedy(std::span<const int32_t>(r.ids + lr, k + 1), drafts);
  } else {
    const Tensor rows = r.host_rows(lr, lr + k + 1);
    const std::span<const int32_t> d = drafts;
    v = accept_each(d, [&](int j) {
      return choose_on_host(s, rows.data<const float>() + j * rows.stride(0), d.first(j),
                            s.cache.n_past + 1 + j, r.ids[lr + j], lps);
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
  if (k == r.k_step) r.n_accs.push_back(v.n_acc);
  if (opt_.trace) {
    *opt_.trace
        << nlohmann::json{{"step", st.steps - 1},      {"request", s.id},
                          {"position", start - 1},     {"drafts", drafts},
                          {"target", v.target_tokens}, {"n_acc", v.n_acc},
                          {"batch", r.n_decode},       {"seconds", monotonic_seconds() - r.t0}}
               .dump()
        << "\n";
  }
  r.next_tokens[i] = v.emitted;
  r.target_rows.push_back({s.id, &s.cache, r.plan.row_start[i], start, r.next_tokens[i]});
  if (after_commit) after_commit(s.id, st.steps - 1, s.cache.n_past);
  RequestOutput o{.id = s.id};
  o.finished = emit(s, v.emitted, o, std::move(lps));
  s.last = v.emitted.back();
  r.out.push_back(std::move(o));
}

// Prefill chunk c: commits its rows, keeps the prompt's prefix when it has just reached it, scores
// prompt tokens (prompt_logprobs) and, after the prompt's last chunk, chooses the first token.
void BatchEngine::commit_chunk(StepRun& r, size_t c) {
  const PrefillChunk& ch = r.sched.prefill[c];
  Sequence& s = *ch.seq;
  const int64_t p = r.first_chunk + static_cast<int64_t>(c);
  if (ch.start > 0 && ch.start == s.stats.cached_tokens) {  // the first chunk after a restore
    ++counters_.prefix_hits;
    counters_.cached_prompt_tokens += ch.start;
  }
  s.cache.commit_prefill(ch.rows);
  s.prefilled += ch.rows;
  counters_.prompt_tokens += ch.rows;
  keep_prefix(s);
  const auto& prompt = s.req.prompt;
  std::vector<int32_t>& next = r.next_tokens[p];
  next.assign(prompt.begin() + ch.start + 1, prompt.begin() + ch.start + ch.rows);
  const bool all_rows = s.req.prompt_logprobs >= 0;
  if (all_rows) {  // row j's logits score prompt token start + j + 1 (teacher forcing)
    const int64_t scored = std::min(ch.rows, s.prompt_len() - 1 - ch.start);
    if (scored > 0) {
      const int64_t lr0 = r.plan.logit_start[p], vocab = model_.config().vocab_size;
      const Tensor rows = r.host_rows(lr0, lr0 + scored);
      for (int64_t j = 0; j < scored; ++j) {
        s.prompt_logprobs.push_back(token_logprobs(rows.data<const float>() + j * rows.stride(0),
                                                   vocab, prompt[ch.start + j + 1],
                                                   s.req.prompt_logprobs));
      }
    }
  }
  if (ch.last()) {
    const int64_t lr = r.plan.logit_start[p] + (all_rows ? ch.rows - 1 : 0);
    std::vector<TokenLogprobs> lps;
    const int32_t first = !s.needs_host_logits()
                              ? r.ids[lr]
                              : choose_on_host(s, r.host_rows(lr, lr + 1).data<const float>(), {},
                                               s.prompt_len(), r.ids[lr], lps);
    next.push_back(first);
    s.phase = Phase::kDecode;
    s.last = first;
    s.first_token_at = monotonic_seconds();
    if (after_commit) after_commit(s.id, -1, s.cache.n_past);
    RequestOutput o{.id = s.id};
    o.prompt_logprobs = std::move(s.prompt_logprobs);
    o.finished = emit(s, std::span<const int32_t>(&first, 1), o, std::move(lps));
    r.out.push_back(std::move(o));
  } else {
    next.push_back(prompt[ch.start + ch.rows]);
  }
  r.target_rows.push_back({s.id, &s.cache, r.plan.row_start[p], ch.start, next});
}

// At a sequence's first decode step and every kTrimEvery after, in k = 0 steps: its deferred rows
// that the next catch-up would drop anyway are dropped now, so that its prompt and a run of k = 0
// steps do not overflow the drafter's queue into a first pass over them (on this CPU at 8
// sequences such passes cost 6% of a run that control kept plain). A catch-up then passes the
// most recent rows within its budget, as after any run of k = 0 steps; older rows are lost to the
// drafter's context, never to an output (drafts decide only speed).
void BatchEngine::trim_drafter_rows(const StepRun& r) {
  constexpr int64_t kTrimEvery = 8;
  std::vector<SeqId> ids;
  for (const Sequence* s : r.sched.decode)
    if (s->stats.steps % kTrimEvery == 1) ids.push_back(s->id);
  if (!ids.empty()) drafter_->catch_up(ids, catch_up_rows_per_seq(opt_, r.n_decode), 0);
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

}  // namespace tandem
