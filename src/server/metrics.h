// Prometheus metrics of the server (text exposition format 0.0.4), named as vLLM names them with
// the prefix `tandem:` (docs/server.md, "Metrics"). Engine-side numbers come from a snapshot the
// engine loop publishes after every step; request-side numbers (finish reasons, latencies) are
// recorded by whoever sees them. Every method is thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v, int64_t times = 1);
  // Appends the _bucket (cumulative, with +Inf), _sum and _count lines of name.
  void render(const std::string& name, std::string& out) const;

 private:
  std::vector<double> bounds_;   // ascending upper bounds
  std::vector<int64_t> counts_;  // per bucket, not cumulative; last: above every bound
  double sum_ = 0;
  int64_t count_ = 0;
};

// What the engine loop reads off the engine after a step.
struct EngineSnapshot {
  int64_t running = 0, waiting = 0;
  double kv_cache_usage = 0, gdn_state_usage = 0;  // fractions in [0, 1]
  int64_t prompt_tokens = 0, generation_tokens = 0, preemptions = 0;
  int64_t prefix_cache_hits = 0, prefix_cache_tokens = 0;  // --enable-prefix-caching
  int64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  std::vector<int64_t> accepted_per_position;
};

class Metrics {
 public:
  Metrics();
  void set_engine(const EngineSnapshot& s);
  // A request ended with finish reason "stop", "length" or "abort".
  void request_finished(const std::string& reason);
  void request_cancelled();  // the client went away
  void observe_ttft(double seconds);
  void observe_inter_token(double seconds, int64_t tokens);
  void observe_e2e(double seconds);
  std::string render() const;

 private:
  mutable std::mutex mu_;
  EngineSnapshot engine_;
  std::map<std::string, int64_t> success_;
  int64_t cancelled_ = 0;
  Histogram ttft_, itl_, e2e_;
};

}  // namespace tandem::server
