// Continuous batching: admission, chunked prefill, preemption by swapping.
#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace tandem {

Scheduler::Scheduler(SchedulerConfig cfg, StatePool& pool, PrefixCache* prefix)
    : cfg_(cfg), pool_(pool), prefix_(prefix != nullptr && prefix->enabled() ? prefix : nullptr) {
  TANDEM_CHECK(cfg.granule >= 1 && cfg.max_num_batched_tokens >= cfg.granule,
               "--max-num-batched-tokens {} must be at least the prefill granule {}",
               cfg.max_num_batched_tokens, cfg.granule);
  TANDEM_CHECK(cfg.prompt_logit_rows >= cfg.granule,
               "scheduler: {} prompt logit rows a step cannot hold a prefill granule of {}",
               cfg.prompt_logit_rows, cfg.granule);
}

void Scheduler::add(Sequence* seq) {
  seq->phase = Phase::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  std::erase(resident_, seq);
  std::erase(waiting_, seq);
  std::erase(swapped_, seq);
  if (seq->cache.resident()) pool_.release(seq->cache);
  seq->swapped.reset();
  seq->phase = Phase::kFinished;
}

int64_t Scheduler::decoding() const {
  return std::count_if(resident_.begin(), resident_.end(),
                       [](const Sequence* s) { return s->phase == Phase::kDecode; });
}

bool Scheduler::admissible(const Sequence* s, int64_t budget, int64_t logit_budget) const {
  if (static_cast<int64_t>(resident_.size()) >= cfg_.max_num_seqs || !swapped_.empty() ||
      budget <= 0)
    return false;
  const int64_t rows = chunk_rows(0, s->prompt_len(), chunk_budget(s, budget, logit_budget));
  return rows > 0 && pool_.free_slots() > 0 && pool_.free_blocks() >= pool_.blocks_for(rows);
}

bool Scheduler::prefill_pending() const {
  const bool returns =
      !swapped_.empty() && static_cast<int64_t>(resident_.size()) < cfg_.max_num_seqs;
  const bool admits =
      !waiting_.empty() && admissible(waiting_.front(), cfg_.max_num_batched_tokens - decoding(),
                                      cfg_.prompt_logit_rows);
  return returns || admits ||
         std::any_of(resident_.begin(), resident_.end(),
                     [](const Sequence* s) { return s->phase == Phase::kPrefill; });
}

int64_t Scheduler::chunk_budget(const Sequence* s, int64_t budget, int64_t logit_budget) const {
  return s->req.prompt_logprobs >= 0 ? std::min(budget, logit_budget) : budget;
}

int64_t Scheduler::chunk_rows(int64_t start, int64_t prompt_len, int64_t budget) const {
  const int64_t remaining = prompt_len - start;
  if (remaining <= budget) return remaining;
  const int64_t end = (start + budget) / cfg_.granule * cfg_.granule;
  return std::max<int64_t>(end - start, 0);
}

int64_t Scheduler::end_at_snapshot(const Sequence* s, int64_t start, int64_t rows) const {
  if (prefix_ == nullptr) return rows;
  const int64_t at = prefix_->snapshot_length(s->prompt_len());
  if (at <= start || start + rows <= at) return rows;
  if (prefix_->contains(std::span<const int32_t>(s->req.prompt).first(static_cast<size_t>(at)))) {
    return rows;  // kept already
  }
  return at - start;
}

int64_t Scheduler::restore_prefix(Sequence* s, int64_t budget) {
  // A prompt whose every row's logits are read (prompt_logprobs) runs from its start.
  if (prefix_ == nullptr || s->req.prompt_logprobs >= 0) return 0;
  int64_t length = 0;
  const SwappedState* kept = prefix_->lookup(s->req.prompt, length);
  if (kept == nullptr) return 0;
  const int64_t rows = end_at_snapshot(s, length, chunk_rows(length, s->prompt_len(), budget));
  if (rows <= 0 || pool_.free_slots() == 0 ||
      pool_.free_blocks() < pool_.blocks_for(length + rows) || !pool_.swap_in(s->cache, *kept)) {
    return 0;
  }
  s->cache.n_past = length;  // as after the prefill chunk that ended there
  s->cache.n_acc = 0;
  s->cache.parity = 0;
  s->stats.cached_tokens = length;
  return length;
}

void Scheduler::preempt(Sequence* victim) {
  victim->swapped = std::make_unique<SwappedState>(pool_.swap_out(victim->cache));
  victim->resume_phase = victim->phase;
  victim->phase = Phase::kSwapped;
  ++victim->stats.preemptions;
  std::erase(resident_, victim);
  swapped_.push_back(victim);
}

bool Scheduler::swap_in(Sequence* seq) {
  // Some headroom beyond its own blocks, so that it does not push a sequence out at once.
  if (pool_.free_blocks() < seq->swapped->n_blocks + 1) return false;
  if (!pool_.swap_in(seq->cache, *seq->swapped)) return false;
  seq->swapped.reset();
  seq->phase = seq->resume_phase;
  const auto at =
      std::upper_bound(resident_.begin(), resident_.end(), seq,
                       [](const Sequence* a, const Sequence* b) { return a->order < b->order; });
  resident_.insert(at, seq);
  return true;
}

ScheduledStep Scheduler::schedule(int64_t decode_rows) {
  ScheduledStep out;
  for (int attempt = 0; attempt < 2 && out.empty(); ++attempt) {
    while (!swapped_.empty() && static_cast<int64_t>(resident_.size()) < cfg_.max_num_seqs &&
           swap_in(swapped_.front()))
      swapped_.pop_front();
    // Decoding sequences first, each growing by its step's rows (capped at the model length:
    // rows past it go to the scratch block, like any rejected draft).
    const std::vector<Sequence*> resident = resident_;
    for (Sequence* s : resident) {
      if (s->phase != Phase::kDecode) continue;
      const int64_t need = std::min(s->cache.n_past + decode_rows, cfg_.max_model_len);
      while (!pool_.reserve(s->cache, need)) {
        Sequence* victim = resident_.back();  // the most recently admitted
        preempt(victim);
        out.preempted.push_back(victim);
        if (victim == s) break;
      }
      if (s->phase == Phase::kDecode) out.decode.push_back(s);
    }
    int64_t budget =
        cfg_.max_num_batched_tokens - static_cast<int64_t>(out.decode.size()) * decode_rows;
    int64_t logit_budget = cfg_.prompt_logit_rows;
    const auto take = [&](const Sequence* s, int64_t rows) {
      budget -= rows;
      if (s->req.prompt_logprobs >= 0) logit_budget -= rows;
    };
    for (Sequence* s : std::vector<Sequence*>(resident_)) {
      if (s->phase != Phase::kPrefill || budget <= 0) continue;
      const int64_t rows = end_at_snapshot(
          s, s->prefilled,
          chunk_rows(s->prefilled, s->prompt_len(), chunk_budget(s, budget, logit_budget)));
      if (rows == 0 || !pool_.reserve(s->cache, s->prefilled + rows)) continue;
      out.prefill.push_back({s, s->prefilled, rows});
      take(s, rows);
    }
    while (!waiting_.empty() && admissible(waiting_.front(), budget, logit_budget)) {
      Sequence* s = waiting_.front();
      const int64_t b = chunk_budget(s, budget, logit_budget);
      const int64_t start = restore_prefix(s, b);
      if (start == 0) {
        TANDEM_CHECK(pool_.acquire(s->cache), "scheduler: admission of request {} failed", s->id);
      }
      const int64_t rows = end_at_snapshot(s, start, chunk_rows(start, s->prompt_len(), b));
      TANDEM_CHECK(rows > 0 && pool_.reserve(s->cache, start + rows),
                   "scheduler: admission of request {} failed", s->id);
      s->phase = Phase::kPrefill;
      s->prefilled = start;
      resident_.push_back(s);
      waiting_.pop_front();
      out.prefill.push_back({s, start, rows});
      take(s, rows);
    }
    // Nothing could run (partial prefills holding every block): free the newest and retry.
    if (out.empty() && !resident_.empty() && attempt == 0) {
      Sequence* victim = resident_.back();
      preempt(victim);
      out.preempted.push_back(victim);
    }
  }
  return out;
}

}  // namespace tandem
