// Prometheus exposition (server/metrics.h): every metric docs/server.md names, in text format
// 0.0.4 (HELP and TYPE before the samples, cumulative histogram buckets ending at +Inf).
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <sstream>

namespace tandem::server {
namespace {

// Sample lines by "name{labels}" -> value; checks every line's syntax on the way.
std::map<std::string, double> samples(const std::string& text) {
  static const std::regex comment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  static const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})?) (\S+)$)");
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.rfind("#", 0) == 0) {
      EXPECT_TRUE(std::regex_match(line, comment)) << line;
    } else if (std::regex_match(line, m, sample)) {
      EXPECT_EQ(out.count(m[1]), 0u) << "duplicate " << line;
      out[m[1]] = std::stod(m[4]);
    } else {
      ADD_FAILURE() << "not a Prometheus line: '" << line << "'";
    }
  }
  EXPECT_EQ(text.back(), '\n');
  return out;
}

TEST(Metrics, EveryContractNameWithItsType) {
  Metrics m;
  const std::string text = m.render();
  const std::vector<std::pair<std::string, std::string>> names = {
      {"tandem:num_requests_running", "gauge"},
      {"tandem:num_requests_waiting", "gauge"},
      {"tandem:kv_cache_usage_perc", "gauge"},
      {"tandem:gdn_state_usage_perc", "gauge"},
      {"tandem:prompt_tokens_total", "counter"},
      {"tandem:generation_tokens_total", "counter"},
      {"tandem:request_success_total", "counter"},
      {"tandem:num_preemptions_total", "counter"},
      {"tandem:spec_decode_num_drafts_total", "counter"},
      {"tandem:spec_decode_num_draft_tokens_total", "counter"},
      {"tandem:spec_decode_num_accepted_tokens_total", "counter"},
      {"tandem:spec_decode_num_accepted_tokens_per_pos_total", "counter"},
      {"tandem:request_cancelled_total", "counter"},
      {"tandem:time_to_first_token_seconds", "histogram"},
      {"tandem:inter_token_latency_seconds", "histogram"},
      {"tandem:e2e_request_latency_seconds", "histogram"},
  };
  for (const auto& [name, type] : names) {
    EXPECT_NE(text.find("# TYPE " + name + " " + type + "\n"), std::string::npos) << name;
    EXPECT_NE(text.find("# HELP " + name + " "), std::string::npos) << name;
  }
  const auto s = samples(text);
  EXPECT_EQ(s.at("tandem:num_requests_running"), 0);
  EXPECT_EQ(s.at("tandem:request_success_total{finished_reason=\"stop\"}"), 0);
  EXPECT_EQ(s.at("tandem:request_success_total{finished_reason=\"length\"}"), 0);
  EXPECT_EQ(s.at("tandem:time_to_first_token_seconds_count"), 0);
}

TEST(Metrics, EngineSnapshotAndRequestCounters) {
  Metrics m;
  m.set_engine({.running = 3,
                .waiting = 2,
                .kv_cache_usage = 0.25,
                .gdn_state_usage = 0.5,
                .prompt_tokens = 100,
                .generation_tokens = 40,
                .preemptions = 1,
                .drafts = 10,
                .draft_tokens = 30,
                .accepted_tokens = 12,
                .accepted_per_position = {7, 4, 1}});
  m.request_finished("stop");
  m.request_finished("stop");
  m.request_finished("length");
  m.request_cancelled();
  const auto s = samples(m.render());
  EXPECT_EQ(s.at("tandem:num_requests_running"), 3);
  EXPECT_EQ(s.at("tandem:num_requests_waiting"), 2);
  EXPECT_EQ(s.at("tandem:kv_cache_usage_perc"), 0.25);
  EXPECT_EQ(s.at("tandem:gdn_state_usage_perc"), 0.5);
  EXPECT_EQ(s.at("tandem:prompt_tokens_total"), 100);
  EXPECT_EQ(s.at("tandem:generation_tokens_total"), 40);
  EXPECT_EQ(s.at("tandem:num_preemptions_total"), 1);
  EXPECT_EQ(s.at("tandem:spec_decode_num_drafts_total"), 10);
  EXPECT_EQ(s.at("tandem:spec_decode_num_draft_tokens_total"), 30);
  EXPECT_EQ(s.at("tandem:spec_decode_num_accepted_tokens_total"), 12);
  EXPECT_EQ(s.at("tandem:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"}"), 7);
  EXPECT_EQ(s.at("tandem:spec_decode_num_accepted_tokens_per_pos_total{position=\"2\"}"), 1);
  EXPECT_EQ(s.at("tandem:request_success_total{finished_reason=\"stop\"}"), 2);
  EXPECT_EQ(s.at("tandem:request_success_total{finished_reason=\"length\"}"), 1);
  EXPECT_EQ(s.at("tandem:request_cancelled_total"), 1);
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Metrics m;
  m.observe_ttft(0.003);          // in le=0.005
  m.observe_ttft(0.3);            // in le=0.5
  m.observe_ttft(1000);           // above every bound
  m.observe_inter_token(0.1, 4);  // four tokens of 0.025 s
  const auto s = samples(m.render());
  const std::string h = "tandem:time_to_first_token_seconds";
  EXPECT_EQ(s.at(h + "_bucket{le=\"0.001\"}"), 0);
  EXPECT_EQ(s.at(h + "_bucket{le=\"0.005\"}"), 1);
  EXPECT_EQ(s.at(h + "_bucket{le=\"0.25\"}"), 1);
  EXPECT_EQ(s.at(h + "_bucket{le=\"0.5\"}"), 2);
  EXPECT_EQ(s.at(h + "_bucket{le=\"80\"}"), 2);
  EXPECT_EQ(s.at(h + "_bucket{le=\"+Inf\"}"), 3);
  EXPECT_EQ(s.at(h + "_count"), 3);
  EXPECT_NEAR(s.at(h + "_sum"), 1000.303, 1e-9);
  const std::string itl = "tandem:inter_token_latency_seconds";
  EXPECT_EQ(s.at(itl + "_bucket{le=\"0.01\"}"), 0);
  EXPECT_EQ(s.at(itl + "_bucket{le=\"0.025\"}"), 4);
  EXPECT_EQ(s.at(itl + "_count"), 4);
  EXPECT_NEAR(s.at(itl + "_sum"), 0.1, 1e-12);
  // Buckets never decrease with their bound.
  std::vector<std::pair<double, double>> buckets;
  for (const auto& [k, v] : s) {
    if (k.rfind(h + "_bucket", 0) != 0) continue;
    const std::string le = k.substr(k.find('"') + 1, k.rfind('"') - k.find('"') - 1);
    buckets.emplace_back(le == "+Inf" ? 1e300 : std::stod(le), v);
  }
  std::sort(buckets.begin(), buckets.end());
  ASSERT_EQ(buckets.size(), 20u);
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_GE(buckets[i].second, buckets[i - 1].second);
  Histogram one({1.0, 2.0});
  one.observe(1.0);  // a bound is inclusive (le)
  one.observe(1.5);
  std::string out;
  one.render("x", out);
  EXPECT_EQ(out,
            "x_bucket{le=\"1\"} 1\nx_bucket{le=\"2\"} 2\nx_bucket{le=\"+Inf\"} 2\nx_sum 2.5\n"
            "x_count 2\n");
}

}  // namespace
}  // namespace tandem::server
