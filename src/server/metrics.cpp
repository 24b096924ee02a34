// Prometheus text rendering of the server's metrics (metrics.h).
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace tandem::server {

namespace {

// Shortest round-trip form; Prometheus reads Go's float syntax (+Inf, NaN).
std::string number(double v) { return fmt::format("{}", v); }

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, const std::string& name, double v, const std::string& labels = {}) {
  if (labels.empty()) {
    fmt::format_to(std::back_inserter(out), "{} {}\n", name, number(v));
  } else {
    fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, labels, number(v));
  }
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v, int64_t times) {
  const size_t b = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[b] += times;
  sum_ += v * static_cast<double>(times);
  count_ += times;
}

void Histogram::render(const std::string& name, std::string& out) const {
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    sample(out, name + "_bucket", static_cast<double>(cumulative),
           fmt::format("le=\"{}\"", number(bounds_[i])));
  }
  sample(out, name + "_bucket", static_cast<double>(count_), "le=\"+Inf\"");
  sample(out, name + "_sum", sum_);
  sample(out, name + "_count", static_cast<double>(count_));
}

// Buckets as vLLM's (seconds).
Metrics::Metrics()
    : success_{{"stop", 0}, {"length", 0}, {"abort", 0}},
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
             10.0, 20.0, 40.0, 80.0}),
      itl_({0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
            5.0, 7.5, 10.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
            240.0, 480.0, 960.0}) {}

void Metrics::set_engine(const EngineSnapshot& s) {
  std::lock_guard lock(mu_);
  engine_ = s;
}

void Metrics::request_finished(const std::string& reason) {
  std::lock_guard lock(mu_);
  ++success_[reason];
}

void Metrics::request_cancelled() {
  std::lock_guard lock(mu_);
  ++cancelled_;
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard lock(mu_);
  ttft_.observe(seconds);
}

void Metrics::observe_inter_token(double seconds, int64_t tokens) {
  if (tokens <= 0) return;
  std::lock_guard lock(mu_);
  itl_.observe(seconds / static_cast<double>(tokens), tokens);
}

void Metrics::observe_e2e(double seconds) {
  std::lock_guard lock(mu_);
  e2e_.observe(seconds);
}

std::string Metrics::render() const {
  std::lock_guard lock(mu_);
  const EngineSnapshot& e = engine_;
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    header(out, name, "gauge", help);
    sample(out, name, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(out, name, "counter", help);
    sample(out, name, v);
  };
  gauge("tandem:num_requests_running", "Requests resident in the engine's batch.",
        static_cast<double>(e.running));
  gauge("tandem:num_requests_waiting", "Requests queued for admission.",
        static_cast<double>(e.waiting));
  gauge("tandem:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0 to 1).",
        e.kv_cache_usage);
  gauge("tandem:gdn_state_usage_perc", "Fraction of GDN state slots in use (0 to 1).",
        e.gdn_state_usage);
  counter("tandem:prompt_tokens_total", "Prompt tokens prefilled.",
          static_cast<double>(e.prompt_tokens));
  counter("tandem:generation_tokens_total", "Tokens generated.",
          static_cast<double>(e.generation_tokens));
  header(out, "tandem:request_success_total", "counter", "Requests finished, by finish reason.");
  for (const auto& [reason, n] : success_) {
    sample(out, "tandem:request_success_total", static_cast<double>(n),
           fmt::format("finished_reason=\"{}\"", reason));
  }
  counter("tandem:request_cancelled_total", "Requests cancelled because the client went away.",
          static_cast<double>(cancelled_));
  counter("tandem:num_preemptions_total", "Sequences preempted (swapped to host memory).",
          static_cast<double>(e.preemptions));
  counter("tandem:prefix_cache_hits_total",
          "Requests admitted from a kept prompt prefix (--enable-prefix-caching).",
          static_cast<double>(e.prefix_cache_hits));
  counter("tandem:prefix_cache_hit_tokens_total",
          "Prompt tokens restored from the prefix cache instead of prefilled.",
          static_cast<double>(e.prefix_cache_tokens));
  counter("tandem:spec_decode_num_drafts_total", "Steps of a sequence that verified drafts.",
          static_cast<double>(e.drafts));
  counter("tandem:spec_decode_num_draft_tokens_total", "Draft tokens proposed.",
          static_cast<double>(e.draft_tokens));
  counter("tandem:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
          static_cast<double>(e.accepted_tokens));
  header(out, "tandem:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Draft tokens accepted, by draft position (0: the first draft).");
  for (size_t i = 0; i < e.accepted_per_position.size(); ++i) {
    sample(out, "tandem:spec_decode_num_accepted_tokens_per_pos_total",
           static_cast<double>(e.accepted_per_position[i]), fmt::format("position=\"{}\"", i));
  }
  header(out, "tandem:time_to_first_token_seconds", "histogram",
         "Seconds from a request's arrival to its first token.");
  ttft_.render("tandem:time_to_first_token_seconds", out);
  header(out, "tandem:inter_token_latency_seconds", "histogram",
         "Seconds between generated tokens of a request (a step's wait shared by its tokens).");
  itl_.render("tandem:inter_token_latency_seconds", out);
  header(out, "tandem:e2e_request_latency_seconds", "histogram",
         "Seconds from a request's arrival to its end.");
  e2e_.render("tandem:e2e_request_latency_seconds", out);
  return out;
}

}  // namespace tandem::server
