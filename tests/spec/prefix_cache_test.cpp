// Prefix caching (engine/prefix_cache.h) on the CPU reference with the shipped model: requests
// that share a prompt prefix, and a next turn that repeats a whole conversation, start from the
// kept prefix, and every output, and the committed state of watched requests after every commit,
// is bit-identical to the request run alone without speculation or cache: plain, MTP k = 3 and
// adaptive control.
#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>

#include "batch_support.h"
#include "engine/batch_engine.h"
#include "spec/mtp_drafter.h"
#include "test_support.h"

namespace tandem {
namespace {

using namespace testing;

TEST(PrefixCache, HitsChangeNoOutputAndNoBitOfTheCommittedState) {
  auto model = testing::load_fixture(testing::kTrainedModel, 256);
  const std::vector<Arrival> arrivals = shared_prefix_arrivals(*model);
  const auto reference = solo(*model, arrivals);
  StateWatch watch(*model, arrivals, {3, 16}, reference);  // one sharing the prefix; the next turn
  for (const SpecConfig& c : {spec_configs()[0], spec_configs()[3], spec_configs()[4]}) {
    BatchEngineOptions opt = batch_options(c.k, c.control);
    opt.prefix_cache_bytes = int64_t{1} << 30;
    BatchEngine engine(*model, c.k > 0 ? std::make_unique<MtpDrafter>(*model) : nullptr, opt);
    watch.attach(engine);
    const BatchRun r = run_batch(engine, arrivals);
    const EngineCounters& n = r.counters;
    std::printf(
        "[prefix cache] %s: %zu requests, %lld prefixes kept, %lld hits, %lld of %lld prompt "
        "tokens restored, %d state checks, %d differ\n",
        c.name, arrivals.size(), static_cast<long long>(n.prefixes_kept),
        static_cast<long long>(n.prefix_hits), static_cast<long long>(n.cached_prompt_tokens),
        static_cast<long long>(n.cached_prompt_tokens + n.prompt_tokens), watch.checks(),
        watch.differing());
    EXPECT_EQ(mismatches(r.tokens, reference, c.name), 0);
    EXPECT_GE(n.prefix_hits, 15) << c.name;  // every request after the first, and the next turn
    EXPECT_GT(r.stats[16].cached_tokens, static_cast<int64_t>(arrivals[5].req.prompt.size()) - 64)
        << c.name << ": the next turn restored its previous turn's prompt";
    EXPECT_GT(watch.checks(), 10) << c.name;
    EXPECT_EQ(watch.differing(), 0) << c.name;
  }
}

// The cache alone: the longest kept prefix shorter than the prompt, by 64-token boundaries; the
// least recently used entry evicted beyond the byte budget (a lookup counts as a use).
TEST(PrefixCache, FindsTheLongestKeptPrefixAndEvictsTheLeastRecentlyUsed) {
  const auto state = [] {  // 4 KB
    SwappedState s;
    s.layers.push_back(Tensor::zeros({1024}, DType::kF32));
    return s;
  };
  PrefixCache cache(3 * 4096, 64);
  std::vector<int32_t> prompt(300);
  std::iota(prompt.begin(), prompt.end(), 0);
  EXPECT_EQ(cache.snapshot_length(300), 256);
  EXPECT_EQ(cache.snapshot_length(257), 256);
  EXPECT_EQ(cache.snapshot_length(256), 192);  // a prefix shorter than the prompt
  EXPECT_EQ(cache.snapshot_length(64), 0);
  const auto first = [&](int64_t n) { return std::span<const int32_t>(prompt).first(n); };
  cache.insert(first(64), state());
  cache.insert(first(192), state());
  int64_t length = -1;
  EXPECT_NE(cache.lookup(prompt, length), nullptr);
  EXPECT_EQ(length, 192);
  EXPECT_NE(cache.lookup(first(192), length), nullptr);  // not itself: its last row must run
  EXPECT_EQ(length, 64);
  std::vector<int32_t> other = prompt;
  other[100] = -1;  // differs inside the 192-token prefix
  EXPECT_NE(cache.lookup(other, length), nullptr);
  EXPECT_EQ(length, 64);
  cache.insert(first(128), state());  // 3 entries: the budget
  cache.insert(first(256), state());  // evicts the least recently used: 192
  EXPECT_EQ(cache.entries(), 3);
  EXPECT_EQ(cache.bytes(), 3 * 4096);
  EXPECT_FALSE(cache.contains(first(192)));
  EXPECT_TRUE(cache.contains(first(64)) && cache.contains(first(128)));
  std::vector<int32_t> p192(prompt.begin(), prompt.begin() + 200);
  EXPECT_NE(cache.lookup(p192, length), nullptr);
  EXPECT_EQ(length, 128);
  PrefixCache off(0, 64);
  off.insert(first(64), state());
  EXPECT_EQ(off.entries(), 0);
  EXPECT_EQ(off.lookup(prompt, length), nullptr);
}

// Without the option nothing is kept or restored; a budget smaller than one state keeps nothing.
TEST(PrefixCache, OffOrTooSmallKeepsNothing) {
  auto model = testing::load_fixture(testing::kTrainedModel, 256);
  const std::vector<Arrival> arrivals = shared_prefix_arrivals(*model);
  for (const int64_t bytes : {int64_t{0}, int64_t{1024}}) {
    BatchEngineOptions opt = batch_options(0, ControlMode::kFixed);
    opt.prefix_cache_bytes = bytes;
    BatchEngine engine(*model, nullptr, opt);
    const BatchRun r = run_batch(engine, arrivals);
    EXPECT_EQ(r.counters.prefix_hits, 0);
    EXPECT_EQ(r.counters.cached_prompt_tokens, 0);
  }
}

}  // namespace
}  // namespace tandem
