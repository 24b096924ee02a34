// Prefix caching (engine/prefix_cache.h) on the CPU reference with the shipped model: requests
// that share a prompt prefix, and a next turn that repeats a whole conversation, start from the
// kept prefix, and every output, and the committed state of watched requests after every commit,
// is bit-identical to the request run alone without speculation or cache: plain, MTP k = 3 and
// adaptive control.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "batch_support.h"
#include "engine/batch_engine.h"
#include "engine/committed_state.h"
#include "engine/generator.h"
#include "spec/mtp_drafter.h"
#include "test_support.h"

namespace tandem {
namespace {

using namespace testing;
using States = std::map<int64_t, std::vector<float>>;

std::vector<float> flat(const Qwen35Model& m, StatePool& pool, const SequenceCache& seq) {
  std::vector<float> out;
  for (const NamedState& s : committed_state(m, pool, seq, /*with_mtp_kv=*/false))
    out.insert(out.end(), s.values.begin(), s.values.end());
  return out;
}

TEST(PrefixCache, HitsChangeNoOutputAndNoBitOfTheCommittedState) {
  auto model = testing::load_fixture(testing::kTrainedModel, 256);
  const std::vector<Arrival> arrivals = shared_prefix_arrivals(*model);
  const auto reference = solo(*model, arrivals);
  const std::vector<size_t> watched{3, 16};  // a request sharing the prefix; the next turn
  std::map<size_t, States> solo_states;
  for (size_t w : watched) {
    Generator gen(*model, nullptr, GeneratorOptions{.max_context = kMaxModelLen});
    gen.after_commit = [&](int64_t, int64_t n_past) {
      solo_states[w][n_past] = flat(*model, gen.engine().pool(), gen.engine().cache(gen.current()));
    };
    ASSERT_EQ(gen.generate(arrivals[w].req).tokens, reference[w]);
  }
  for (const SpecConfig& c : {spec_configs()[0], spec_configs()[3], spec_configs()[4]}) {
    BatchEngineOptions opt = batch_options(c.k, c.control);
    opt.prefix_cache_bytes = int64_t{1} << 30;
    BatchEngine engine(*model, c.k > 0 ? std::make_unique<MtpDrafter>(*model) : nullptr, opt);
    std::map<RequestId, size_t> watched_ids;
    std::vector<size_t> order(arrivals.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return arrivals[a].step < arrivals[b].step; });
    for (size_t i = 0; i < order.size(); ++i) {
      for (size_t w : watched) {
        if (order[i] == w) watched_ids[static_cast<RequestId>(i)] = w;
      }
    }
    int checks = 0, bad = 0;
    engine.after_commit = [&](RequestId id, int64_t, int64_t n_past) {
      const auto w = watched_ids.find(id);
      if (w == watched_ids.end()) return;
      const States& st = solo_states[w->second];
      const auto it = st.find(n_past);
      if (it == st.end()) return;  // (a last step may commit past the solo run's end)
      const std::vector<float> s = flat(*model, engine.pool(), engine.cache(id));
      ++checks;
      bad += s.size() != it->second.size() ||
             std::memcmp(s.data(), it->second.data(), s.size() * sizeof(float)) != 0;
    };
    const BatchRun r = run_batch(engine, arrivals);
    const EngineCounters& n = r.counters;
    std::printf(
        "[prefix cache] %s: %zu requests, %lld prefixes kept, %lld hits, %lld of %lld prompt "
        "tokens restored, %d state checks, %d differ\n",
        c.name, arrivals.size(), static_cast<long long>(n.prefixes_kept),
        static_cast<long long>(n.prefix_hits), static_cast<long long>(n.cached_prompt_tokens),
        static_cast<long long>(n.cached_prompt_tokens + n.prompt_tokens), checks, bad);
    EXPECT_EQ(mismatches(r.tokens, reference, c.name), 0);
    EXPECT_GE(n.prefix_hits, 15) << c.name;  // every request after the first, and the next turn
    EXPECT_GT(r.stats[16].cached_tokens, static_cast<int64_t>(arrivals[5].req.prompt.size()) - 64)
        << c.name << ": the next turn restored its previous turn's prompt";
    EXPECT_GT(checks, 10) << c.name;
    EXPECT_EQ(bad, 0) << c.name;
  }
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
