// The engine thread: the only thread that touches the BatchEngine (which is not thread-safe).
// HTTP handlers submit requests and cancellations into a mutex-protected queue; the loop drains
// it at each step boundary, steps while the engine has work, routes every RequestOutput to its
// request's Channel and sleeps on a condition variable when idle. Back-pressure: a submission is
// refused (503) while --max-queue requests already wait. Not here: text, stop strings, JSON.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/batch_engine.h"
#include "server/metrics.h"

namespace tandem::server {

// What the engine produced for one request since the HTTP side last looked.
struct Delivery {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  std::vector<TokenLogprobs> prompt_logprobs;  // Request::prompt_logprobs, with the first token
  bool accepted = false;                       // the engine took the request
  std::optional<std::string> error;            // the engine refused it (its message); then finished
  bool finished = false;
  std::string finish_reason;  // "stop" | "length" | "cancelled" | "abort" | "error"
  GenerationStats stats;      // when finished
};

// One request's mailbox: written by the engine thread, read by its HTTP handler.
class Channel {
 public:
  explicit Channel(double arrival) : arrival_(arrival) {}
  // Waits up to timeout for anything new (or returns at once if something is there); moves out
  // the tokens and logprobs that arrived and copies the state. false: nothing new.
  bool wait(std::chrono::milliseconds timeout, Delivery& out);
  double arrival() const { return arrival_; }

 private:
  friend class EngineLoop;
  void deliver(const RequestOutput& o);
  void accept();
  void end(const std::string& reason, const std::optional<std::string>& error = std::nullopt,
           const GenerationStats& stats = {});

  std::mutex mu_;
  std::condition_variable cv_;
  Delivery pending_;
  bool dirty_ = false;
  // Engine-thread state.
  const double arrival_;
  RequestId id_ = -1;
  double last_token_at_ = 0;
  bool cancel_requested_ = false;
};

class EngineLoop {
 public:
  // max_queue: requests that may wait for admission (queued here or in the scheduler).
  EngineLoop(BatchEngine& engine, Metrics& metrics, int64_t max_queue);
  ~EngineLoop();  // shutdown()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a request; throws ApiError 503 when the queue is full or the loop is shutting down.
  std::shared_ptr<Channel> submit(Request req, double arrival);
  // Cancels a request at the next step boundary (its final Delivery says "cancelled").
  void cancel(const std::shared_ptr<Channel>& ch);
  // Aborts every request in flight (each finishes with "abort"), refuses new ones and joins the
  // thread. Idempotent.
  void shutdown();
  bool stopping() const { return stopping_.load(); }

 private:
  void run();
  void admit(std::deque<std::pair<std::shared_ptr<Channel>, Request>>& subs);
  void route(std::vector<RequestOutput> outs);
  void abort_all(std::deque<std::pair<std::shared_ptr<Channel>, Request>>& subs);
  void publish();

  BatchEngine& engine_;
  Metrics& metrics_;
  const int64_t max_queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Channel>, Request>> subs_;
  std::vector<std::shared_ptr<Channel>> cancels_;
  int64_t in_transit_ = 0;      // submitted, not yet handed to the engine
  int64_t engine_waiting_ = 0;  // the scheduler's waiting requests, as last seen
  std::atomic<bool> stopping_{false};
  bool stop_ = false;
  std::map<RequestId, std::shared_ptr<Channel>> active_;  // engine thread only
  std::thread thread_;
};

}  // namespace tandem::server
