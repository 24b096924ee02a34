// The engine thread and the request channels (engine_loop.h).
#include "server/engine_loop.h"

#include <fmt/format.h>

#include <cstdio>

#include "core/clock.h"
#include "core/error.h"
#include "server/api_error.h"

namespace tandem::server {

bool Channel::wait(std::chrono::milliseconds timeout, Delivery& out) {
  std::unique_lock lock(mu_);
  if (!dirty_) cv_.wait_for(lock, timeout, [&] { return dirty_; });
  if (!dirty_) return false;
  out.tokens = std::move(pending_.tokens);
  out.logprobs = std::move(pending_.logprobs);
  out.prompt_logprobs = std::move(pending_.prompt_logprobs);
  pending_.tokens.clear();
  pending_.logprobs.clear();
  pending_.prompt_logprobs.clear();
  out.accepted = pending_.accepted;
  out.error = pending_.error;
  out.finished = pending_.finished;
  out.finish_reason = pending_.finish_reason;
  out.stats = pending_.stats;
  dirty_ = false;
  return true;
}

void Channel::deliver(const RequestOutput& o) {
  {
    std::lock_guard lock(mu_);
    if (pending_.finished) return;
    pending_.tokens.insert(pending_.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    pending_.logprobs.insert(pending_.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    pending_.prompt_logprobs.insert(pending_.prompt_logprobs.end(), o.prompt_logprobs.begin(),
                                    o.prompt_logprobs.end());
    if (o.finished) {
      pending_.finished = true;
      pending_.finish_reason = o.finish_reason;
      pending_.stats = o.stats;
    }
    dirty_ = true;
  }
  cv_.notify_all();
}

void Channel::accept() {
  {
    std::lock_guard lock(mu_);
    pending_.accepted = true;
    dirty_ = true;
  }
  cv_.notify_all();
}

void Channel::end(const std::string& reason, const std::optional<std::string>& error,
                  const GenerationStats& stats) {
  {
    std::lock_guard lock(mu_);
    if (pending_.finished) return;
    pending_.finished = true;
    pending_.finish_reason = reason;
    pending_.error = error;
    pending_.stats = stats;
    dirty_ = true;
  }
  cv_.notify_all();
}

EngineLoop::EngineLoop(BatchEngine& engine, Metrics& metrics, int64_t max_queue)
    : engine_(engine), metrics_(metrics), max_queue_(max_queue) {
  publish();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { shutdown(); }

std::shared_ptr<Channel> EngineLoop::submit(Request req, double arrival) {
  auto ch = std::make_shared<Channel>(arrival);
  {
    std::lock_guard lock(mu_);
    if (stop_) {
      throw ApiError(503, "the server is shutting down", "server_error", {}, "shutting_down");
    }
    const int64_t waiting = in_transit_ + engine_waiting_;
    if (waiting >= max_queue_) {
      throw ApiError(503,
                     fmt::format("the server is busy: {} requests wait (--max-queue {}); retry "
                                 "later",
                                 waiting, max_queue_),
                     "server_error", {}, "queue_full");
    }
    subs_.emplace_back(ch, std::move(req));
    ++in_transit_;
  }
  cv_.notify_one();
  return ch;
}

void EngineLoop::cancel(const std::shared_ptr<Channel>& ch) {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;  // shutdown aborts it anyway
    cancels_.push_back(ch);
  }
  cv_.notify_one();
}

void EngineLoop::shutdown() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stopping_ = true;
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::admit(std::deque<std::pair<std::shared_ptr<Channel>, Request>>& subs) {
  if (subs.empty()) return;
  for (auto& [ch, req] : subs) {
    if (ch->cancel_requested_) {  // cancelled before it reached the engine
      ch->end("cancelled");
      continue;
    }
    try {
      ch->id_ = engine_.add(std::move(req));
      active_[ch->id_] = ch;
      ch->accept();
    } catch (const std::exception& e) {
      ch->end("error", std::string(e.what()));
    }
  }
  // What waits moves from the queue to the scheduler in one step for submit()'s count.
  std::lock_guard lock(mu_);
  in_transit_ -= static_cast<int64_t>(subs.size());
  engine_waiting_ = engine_.waiting();
  subs.clear();
}

void EngineLoop::route(std::vector<RequestOutput> outs) {
  const double t = monotonic_seconds();
  for (RequestOutput& o : outs) {
    auto it = active_.find(o.id);
    if (it == active_.end()) continue;
    Channel& ch = *it->second;
    const auto n = static_cast<int64_t>(o.new_tokens.size());
    if (n > 0) {
      if (ch.last_token_at_ == 0) {
        metrics_.observe_ttft(t - ch.arrival_);
      } else {
        metrics_.observe_inter_token(t - ch.last_token_at_, n);
      }
      ch.last_token_at_ = t;
    }
    if (o.finished) metrics_.observe_e2e(t - ch.arrival_);  // counted before the client hears
    ch.deliver(o);
    if (o.finished) active_.erase(it);
  }
}

void EngineLoop::abort_all(std::deque<std::pair<std::shared_ptr<Channel>, Request>>& subs) {
  for (auto& [ch, req] : subs) ch->end("abort");
  subs.clear();
  for (auto& [id, ch] : active_) engine_.cancel(id);
  std::vector<RequestOutput> outs;
  try {
    outs = engine_.step();  // the cancellations' final outputs, with their statistics
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem serve: engine step failed during shutdown: %s\n", e.what());
  }
  for (RequestOutput& o : outs) {
    auto it = active_.find(o.id);
    if (it == active_.end()) continue;
    it->second->end("abort", std::nullopt, o.stats);
  }
  for (auto& [id, ch] : active_) ch->end("abort");
  active_.clear();
}

void EngineLoop::publish() {
  const StatePool& pool = engine_.pool();
  const CacheConfig& c = pool.config();
  const EngineCounters& k = engine_.counters();
  EngineSnapshot s;
  s.running = engine_.running();
  s.waiting = engine_.waiting();
  s.kv_cache_usage =
      c.num_blocks > 0 ? static_cast<double>(pool.used_blocks()) / c.num_blocks : 0.0;
  s.gdn_state_usage = c.num_slots > 0 ? static_cast<double>(pool.used_slots()) / c.num_slots : 0.0;
  s.prompt_tokens = k.prompt_tokens;
  s.generation_tokens = k.generation_tokens;
  s.preemptions = k.preemptions;
  s.prefix_cache_hits = k.prefix_hits;
  s.prefix_cache_tokens = k.cached_prompt_tokens;
  s.drafts = k.drafting_steps;
  s.draft_tokens = k.draft_tokens;
  s.accepted_tokens = k.accepted_tokens;
  s.accepted_per_position = k.accepted_per_position;
  {
    std::lock_guard lock(mu_);
    engine_waiting_ = s.waiting;
    s.waiting += in_transit_;
  }
  metrics_.set_engine(s);
}

void EngineLoop::run() {
  std::deque<std::pair<std::shared_ptr<Channel>, Request>> subs;
  std::vector<std::shared_ptr<Channel>> cancels;
  for (;;) {
    bool stop = false;
    {
      std::unique_lock lock(mu_);
      if (engine_.idle()) {
        cv_.wait(lock, [&] { return stop_ || !subs_.empty() || !cancels_.empty(); });
      }
      stop = stop_;
      subs.swap(subs_);
      cancels.swap(cancels_);
    }
    if (stop) {
      {
        std::lock_guard lock(mu_);
        in_transit_ -= static_cast<int64_t>(subs.size());
      }
      abort_all(subs);
      publish();
      return;
    }
    for (const std::shared_ptr<Channel>& ch : cancels) {
      ch->cancel_requested_ = true;
      if (ch->id_ >= 0) engine_.cancel(ch->id_);  // its final output comes with the next step
    }
    cancels.clear();
    admit(subs);
    if (!engine_.idle()) {
      try {
        std::vector<RequestOutput> outs = engine_.step();
        publish();  // the step's counts, before anyone hears of it
        route(std::move(outs));
        continue;
      } catch (const std::exception& e) {
        // An engine failure is not a request's fault: every request in flight ends with it.
        std::fprintf(stderr, "tandem serve: engine step failed: %s\n", e.what());
        for (auto& [id, ch] : active_) {
          try {
            engine_.cancel(id);
          } catch (const std::exception&) {
          }
          ch->end("error", fmt::format("engine failure: {}", e.what()));
        }
        active_.clear();
        try {
          engine_.step();  // collect the cancellations
        } catch (const std::exception&) {
        }
      }
    }
    publish();
  }
}

}  // namespace tandem::server
