// Invariant 1 under load, on the CPU reference with the shipped model (issue 14): requests arrive
// at random steps and share every step with others (continuous batching, chunked prefill under a
// token budget, 1..k+1 verify rows per sequence), and each one's output is bit-identical to the
// same request run alone without speculation: plain, MTP k = 1..3 and adaptive control, greedy
// and seeded sampling; the committed GDN state and KV of sampled sequences equal their solo runs
// after every commit; forced preemption (a pool too small for the batch) and cancellation change
// nothing for the others.
#include <gtest/gtest.h>

#include "batch_support.h"
#include "engine/batch_engine.h"
#include "spec/mtp_drafter.h"
#include "test_support.h"

namespace tandem {
namespace {

using namespace testing;

std::unique_ptr<Drafter> mtp_or_none(Qwen35Model& m, int k) {
  return k > 0 ? std::make_unique<MtpDrafter>(m) : nullptr;
}

TEST(BatchExactness, SixtyFourGreedyRequestsEqualTheirSoloRuns) {
  auto model = testing::load_fixture(testing::kTrainedModel, 256);
  const std::vector<Arrival> arrivals = random_arrivals(*model, 64, 14, false);
  const auto reference = solo(*model, arrivals);
  for (const testing::SpecConfig& c : testing::spec_configs()) {
    BatchEngine engine(*model, mtp_or_none(*model, c.k), batch_options(c.k, c.control));
    const BatchRun r = run_batch(engine, arrivals);
    std::printf(
        "[batch exactness] %s: 64 requests, %lld steps, up to %lld running, %lld drafts, %lld "
        "accepted, %d of 64 differ\n",
        c.name, static_cast<long long>(r.counters.steps), static_cast<long long>(r.max_running),
        static_cast<long long>(r.counters.draft_tokens),
        static_cast<long long>(r.counters.accepted_tokens),
        mismatches(r.tokens, reference, c.name));
    EXPECT_GE(r.max_running, 8) << c.name << ": the requests did share steps";
    if (c.k > 0 && c.control == ControlMode::kFixed) {
      EXPECT_GT(r.counters.accepted_tokens, 0) << c.name;
    }
  }
}

// Per-request draft caps (Request::max_draft_tokens, the server's num_speculative_tokens): each
// request drafts at most its cap a step (none at 0) while the others draft 3, and every output is
// still its solo run's.
TEST(BatchExactness, PerRequestDraftCapsChangeNoOutputAndHoldTheirDrafts) {
  auto model = testing::load_fixture(testing::kTrainedModel, 256);
  std::vector<Arrival> arrivals = random_arrivals(*model, 32, 33, false);
  for (size_t i = 0; i < arrivals.size(); ++i) {
    arrivals[i].req.max_draft_tokens = static_cast<int>(i % 4) - 1;  // -1 (the engine's), 0, 1, 2
  }
  const auto reference = solo(*model, arrivals);
  BatchEngine engine(*model, mtp_or_none(*model, 3), batch_options(3, ControlMode::kFixed));
  const BatchRun r = run_batch(engine, arrivals);
  EXPECT_EQ(mismatches(r.tokens, reference, "draft caps"), 0);
  std::vector<int64_t> most(4, 0);  // by cap + 1: the most drafts any of its requests took
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const int cap = arrivals[i].req.max_draft_tokens;
    const GenerationStats& st = r.stats[i];
    for (size_t k = 0; k < st.steps_per_k.size(); ++k) {
      if (st.steps_per_k[k] == 0) continue;
      most[static_cast<size_t>(cap + 1)] =
          std::max(most[static_cast<size_t>(cap + 1)], static_cast<int64_t>(k));
      if (cap >= 0) {
        EXPECT_LE(static_cast<int>(k), cap) << "request " << i;
      }
    }
  }
  std::printf(
      "[batch exactness] draft caps -1 / 0 / 1 / 2: the most drafts a step %lld / %lld / "
      "%lld / %lld\n",
      static_cast<long long>(most[0]), static_cast<long long>(most[1]),
      static_cast<long long>(most[2]), static_cast<long long>(most[3]));
  EXPECT_EQ(most[0], 3);  // uncapped requests drafted the engine's k
  EXPECT_EQ(most[1], 0);
  EXPECT_EQ(most[2], 1);
  EXPECT_EQ(most[3], 2);
}

// Catch-ups that drop every deferred MTP row but the last step's (catch_up_rows 0): the drafts
// then attend to MTP KV entries never written for those positions, which may make them worse but
// must not change any output.
TEST(BatchExactness, CatchUpsThatDropDeferredRowsChangeNoOutput) {
  auto model = testing::load_fixture(testing::kTrainedModel, 256);
  const std::vector<Arrival> arrivals = random_arrivals(*model, 32, 21, false);
  const auto reference = solo(*model, arrivals);
  BatchEngineOptions opt = batch_options(3, ControlMode::kAdaptive);
  opt.catch_up_rows = 0;
  opt.catch_up_min_rows = 0;
  BatchEngine engine(*model, mtp_or_none(*model, 3), opt);
  const BatchRun r = run_batch(engine, arrivals);
  std::printf("[batch exactness] dropping catch-ups: %lld catch-ups, %lld drafts, %lld accepted\n",
              static_cast<long long>(r.counters.catch_ups),
              static_cast<long long>(r.counters.draft_tokens),
              static_cast<long long>(r.counters.accepted_tokens));
  // Control measures k = 0 before k = 1, so its first drafting step follows k = 0 steps.
  EXPECT_GT(r.counters.catch_ups, 0);
  EXPECT_EQ(mismatches(r.tokens, reference, "dropping catch-ups"), 0);
}

TEST(BatchExactness, SampledRequestsAreReproducibleAndKeepTheirSoloState) {
  auto model = testing::load_fixture(testing::kTrainedModel, 256);
  std::vector<Arrival> arrivals = random_arrivals(*model, 24, 15, /*sampled=*/true);
  const auto reference = solo(*model, arrivals);
  StateWatch watch(*model, arrivals, {1, 3}, reference);  // two sampled requests
  for (int k : {0, 3}) {
    BatchEngine engine(*model, mtp_or_none(*model, k), batch_options(k, ControlMode::kFixed));
    watch.attach(engine);
    const BatchRun r = run_batch(engine, arrivals);
    EXPECT_EQ(mismatches(r.tokens, reference, "sampled k=" + std::to_string(k)), 0);
    std::printf("[sampled batch] k=%d: 24 requests (12 sampled), %d state checks, %d differ\n", k,
                watch.checks(), watch.differing());
    EXPECT_GT(watch.checks(), 20);
    EXPECT_EQ(watch.differing(), 0);
  }
}

TEST(BatchExactness, ForcedPreemptionChangesNoOutput) {
  auto model = testing::load_fixture(testing::kTrainedModel, 256);
  std::vector<Arrival> arrivals = random_arrivals(*model, 20, 16, /*sampled=*/true);
  for (Arrival& a : arrivals) {  // long generations, all at once: the pool must run out
    a.step = 0;
    a.req.max_tokens = 64;
    a.req.stop_ids.clear();
  }
  const auto reference = solo(*model, arrivals);
  for (int k : {0, 2}) {
    BatchEngineOptions o = batch_options(k, ControlMode::kFixed);
    o.max_num_seqs = 8;
    o.kv_blocks = 24;  // 8 sequences of up to ~660 positions need far more
    BatchEngine engine(*model, mtp_or_none(*model, k), o);
    const BatchRun r = run_batch(engine, arrivals);
    std::printf("[preemption] k=%d: %lld preemptions, %lld steps\n", k,
                static_cast<long long>(r.counters.preemptions),
                static_cast<long long>(r.counters.steps));
    EXPECT_GT(r.counters.preemptions, 0);
    EXPECT_EQ(mismatches(r.tokens, reference, "preemption k=" + std::to_string(k)), 0);
    EXPECT_EQ(engine.pool().used_blocks(), 0);
    EXPECT_EQ(engine.pool().used_slots(), 0);
  }
}

TEST(BatchExactness, CancelFreesSlotAndBlocksAtOnce) {
  auto model = testing::load_fixture(testing::kTrainedModel, 256);
  std::vector<Arrival> arrivals = random_arrivals(*model, 6, 17, false);
  for (Arrival& a : arrivals) a.step = 0, a.req.max_tokens = 40, a.req.stop_ids.clear();
  const auto reference = solo(*model, arrivals);
  BatchEngine engine(*model, std::make_unique<MtpDrafter>(*model),
                     batch_options(2, ControlMode::kFixed));
  const RequestId victim = 2;  // the third request added
  bool cancelled = false;
  std::vector<std::vector<int32_t>> got;
  std::string victim_reason;
  const BatchRun r = run_batch(engine, arrivals, [&](BatchEngine& e, int64_t step) {
    if (step != 12 || cancelled) return;
    const int64_t slots = e.pool().used_slots(), blocks = e.pool().used_blocks();
    const int64_t held = static_cast<int64_t>(e.cache(victim).blocks.size());
    ASSERT_GT(held, 0);
    e.cancel(victim);
    cancelled = true;
    EXPECT_EQ(e.pool().used_slots(), slots - 1);
    EXPECT_EQ(e.pool().used_blocks(), blocks - held);
  });
  EXPECT_TRUE(cancelled);
  for (size_t i = 0; i < arrivals.size(); ++i) {
    if (static_cast<RequestId>(i) == victim) {
      EXPECT_LT(r.tokens[i].size(), reference[i].size());
      EXPECT_TRUE(std::equal(r.tokens[i].begin(), r.tokens[i].end(), reference[i].begin()));
    } else {
      EXPECT_EQ(r.tokens[i], reference[i]) << "request " << i;
    }
  }
  EXPECT_EQ(engine.pool().used_slots(), 0);
}

}  // namespace
}  // namespace tandem
