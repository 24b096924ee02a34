// The engine thread (server/engine_loop.h) with the shipped model: requests submitted from many
// threads come back with the tokens the engine gives them alone, a cancellation frees the slot
// within a step, a full queue refuses at once, shutdown aborts what is in flight, and the final
// delivery carries the request's statistics.
#include "server/engine_loop.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/clock.h"
#include "server/api_error.h"
#include "spec/mtp_drafter.h"
#include "test_support.h"

namespace tandem::server {
namespace {

using namespace std::chrono_literals;

struct Collected {
  std::vector<int32_t> tokens;
  std::string finish_reason;
  std::optional<std::string> error;
  GenerationStats stats;
  int deliveries = 0;
};

Collected collect(Channel& ch, std::chrono::seconds limit = 60s) {
  Collected c;
  Delivery d;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!ch.wait(50ms, d)) continue;
    ++c.deliveries;
    c.tokens.insert(c.tokens.end(), d.tokens.begin(), d.tokens.end());
    if (d.finished) {
      c.finish_reason = d.finish_reason;
      c.error = d.error;
      c.stats = d.stats;
      return c;
    }
  }
  ADD_FAILURE() << "no final delivery within " << limit.count() << " s";
  return c;
}

// Waits until ch has delivered at least n tokens, or its final delivery, within `limit`; returns
// the tokens delivered (fewer than n: the test fails).
int64_t wait_tokens(Channel& ch, int64_t n, std::chrono::seconds limit = 60s) {
  int64_t got = 0;
  Delivery d;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (got < n && std::chrono::steady_clock::now() < deadline) {
    if (!ch.wait(50ms, d)) continue;
    got += static_cast<int64_t>(d.tokens.size());
    if (d.finished) break;
  }
  if (got < n) ADD_FAILURE() << got << " of " << n << " tokens within " << limit.count() << " s";
  return got;
}

class EngineLoopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = testing::load_fixture(testing::kTrainedModel).release(); }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  static BatchEngineOptions options(int64_t max_seqs, int k = 0) {
    return BatchEngineOptions{.num_speculative_tokens = k,
                              .max_num_seqs = max_seqs,
                              .max_model_len = 512,
                              .keep_finished = false};
  }

  static Request request(int salt, int max_tokens, bool stop_at_eos = true) {
    Request r;
    for (int i = 0; i < 5 + salt % 7; ++i) r.prompt.push_back((salt * 131 + i * 17) % 8000);
    r.max_tokens = max_tokens;
    if (stop_at_eos) r.stop_ids = model_->config().eos_token_ids;
    return r;
  }

  // Waits until the published metrics say no request runs or waits.
  static bool drained(const Metrics& m) {
    for (int i = 0; i < 200; ++i) {
      const std::string text = m.render();
      if (text.find("\ntandem:num_requests_running 0\n") != std::string::npos &&
          text.find("\ntandem:num_requests_waiting 0\n") != std::string::npos &&
          text.find("\ntandem:gdn_state_usage_perc 0\n") != std::string::npos &&
          text.find("\ntandem:kv_cache_usage_perc 0\n") != std::string::npos) {
        return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  static Qwen35Model* model_;
};
Qwen35Model* EngineLoopTest::model_ = nullptr;

TEST_F(EngineLoopTest, ConcurrentSubmissionsGetTheTokensOfARunAlone) {
  constexpr int kRequests = 6;
  std::vector<std::vector<int32_t>> want;
  {
    BatchEngineOptions o = options(1);
    o.keep_finished = true;  // run() reads the results back
    BatchEngine alone(*model_, nullptr, o);
    for (int i = 0; i < kRequests; ++i) want.push_back(alone.run({request(i, 12 + i)})[0].tokens);
  }
  BatchEngine engine(*model_, nullptr, options(4));
  Metrics metrics;
  EngineLoop loop(engine, metrics, 64);
  std::vector<Collected> got(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      auto ch = loop.submit(request(i, 12 + i), monotonic_seconds());
      got[i] = collect(*ch);
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(got[i].tokens, want[i]) << "request " << i;
    EXPECT_TRUE(got[i].finish_reason == "length" || got[i].finish_reason == "stop");
    EXPECT_FALSE(got[i].error.has_value());
    EXPECT_EQ(got[i].stats.generated_tokens, static_cast<int64_t>(want[i].size()));
    EXPECT_EQ(got[i].stats.prompt_tokens, static_cast<int64_t>(request(i, 1).prompt.size()));
  }
  EXPECT_TRUE(drained(metrics));
  const std::string text = metrics.render();
  EXPECT_NE(text.find("tandem:time_to_first_token_seconds_count 6\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tandem:e2e_request_latency_seconds_count 6\n"), std::string::npos);
}

TEST_F(EngineLoopTest, CancelFreesTheSlotWithinOneStep) {
  BatchEngine engine(*model_, nullptr, options(2));
  Metrics metrics;
  EngineLoop loop(engine, metrics, 64);
  auto ch = loop.submit(request(1, 400, /*stop_at_eos=*/false), monotonic_seconds());
  int64_t before = wait_tokens(*ch, 3);
  Delivery d;
  while (ch->wait(0ms, d)) {  // what is delivered already, so that only steps after it count
    before += static_cast<int64_t>(d.tokens.size());
    ASSERT_FALSE(d.finished);
  }
  loop.cancel(ch);
  const Collected rest = collect(*ch);
  EXPECT_EQ(rest.finish_reason, "cancelled");
  // The step in flight when cancel() came may still deliver its token; no step after it does.
  EXPECT_LE(rest.tokens.size(), 1u);
  EXPECT_LT(before + static_cast<int64_t>(rest.tokens.size()), 400);
  EXPECT_TRUE(drained(metrics)) << metrics.render();
}

TEST_F(EngineLoopTest, CancelBeforeAdmissionEndsTheRequest) {
  BatchEngine engine(*model_, nullptr, options(1));
  Metrics metrics;
  EngineLoop loop(engine, metrics, 64);
  auto busy = loop.submit(request(2, 300, false), monotonic_seconds());
  auto queued = loop.submit(request(3, 300, false), monotonic_seconds());  // waits for the slot
  loop.cancel(queued);
  EXPECT_EQ(collect(*queued).finish_reason, "cancelled");
  loop.cancel(busy);
  EXPECT_EQ(collect(*busy).finish_reason, "cancelled");
  EXPECT_TRUE(drained(metrics));
}

TEST_F(EngineLoopTest, AFullQueueRefusesAtOnce) {
  BatchEngine engine(*model_, nullptr, options(1));
  Metrics metrics;
  {
    EngineLoop none(engine, metrics, 0);
    try {
      none.submit(request(1, 4), monotonic_seconds());
      FAIL() << "accepted with --max-queue 0";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 503);
      EXPECT_EQ(e.code, "queue_full");
    }
  }
  EngineLoop loop(engine, metrics, 1);
  auto running = loop.submit(request(1, 300, false), monotonic_seconds());
  wait_tokens(*running, 1);  // running, no longer waiting
  auto waiting = loop.submit(request(2, 300, false), monotonic_seconds());  // the one that may wait
  EXPECT_THROW(loop.submit(request(3, 4), monotonic_seconds()), ApiError);
  loop.cancel(running);
  loop.cancel(waiting);
  EXPECT_EQ(collect(*running).finish_reason, "cancelled");
  EXPECT_EQ(collect(*waiting).finish_reason, "cancelled");
}

TEST_F(EngineLoopTest, ShutdownAbortsWhatIsInFlight) {
  BatchEngine engine(*model_, nullptr, options(2));
  Metrics metrics;
  EngineLoop loop(engine, metrics, 8);
  auto ch = loop.submit(request(4, 400, false), monotonic_seconds());
  wait_tokens(*ch, 1);
  loop.shutdown();
  const Collected c = collect(*ch);
  EXPECT_EQ(c.finish_reason, "abort");
  EXPECT_GT(c.stats.generated_tokens, 0);  // the abort still carries the statistics
  try {
    loop.submit(request(5, 4), monotonic_seconds());
    FAIL() << "accepted after shutdown";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 503);
  }
  loop.shutdown();  // idempotent
}

TEST_F(EngineLoopTest, TheEnginesRefusalComesBackAsAnError) {
  BatchEngine engine(*model_, nullptr, options(1));
  Metrics metrics;
  EngineLoop loop(engine, metrics, 8);
  Request bad = request(1, 4);
  bad.prompt.push_back(model_->config().vocab_size);  // out of range
  const Collected c = collect(*loop.submit(bad, monotonic_seconds()));
  EXPECT_EQ(c.finish_reason, "error");
  ASSERT_TRUE(c.error.has_value());
  EXPECT_NE(c.error->find("outside the vocabulary"), std::string::npos) << *c.error;
  // The loop keeps serving.
  EXPECT_EQ(collect(*loop.submit(request(2, 3), monotonic_seconds())).tokens.size(), 3u);
}

TEST_F(EngineLoopTest, SpeculationStatisticsComeWithTheFinalDelivery) {
  BatchEngine engine(*model_, std::make_unique<MtpDrafter>(*model_), options(2, 2));
  Metrics metrics;
  EngineLoop loop(engine, metrics, 8);
  const Collected c = collect(*loop.submit(request(6, 40, false), monotonic_seconds()));
  EXPECT_EQ(c.finish_reason, "length");
  EXPECT_EQ(c.tokens.size(), 40u);
  EXPECT_GT(c.stats.drafting_steps, 0);
  EXPECT_GT(c.stats.draft_tokens, 0);
  EXPECT_LE(c.stats.accepted_tokens, c.stats.draft_tokens);
  EXPECT_TRUE(drained(metrics));
  const std::string text = metrics.render();
  EXPECT_EQ(text.find("tandem:spec_decode_num_drafts_total 0\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace tandem::server
