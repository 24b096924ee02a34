// Helpers of the batched exactness tests (CPU and CUDA): requests arriving at random steps, each
// run alone without speculation for reference, and a batched run of all of them.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/batch_engine.h"
#include "engine/committed_state.h"
#include "engine/generator.h"

namespace tandem::testing {

// The speculation settings every batched exactness test runs: plain, MTP k = 1..3, adaptive.
struct SpecConfig {
  int k;
  ControlMode control;
  const char* name;
};
inline const std::vector<SpecConfig>& spec_configs() {
  static const std::vector<SpecConfig> c{{0, ControlMode::kFixed, "plain"},
                                         {1, ControlMode::kFixed, "mtp k=1"},
                                         {2, ControlMode::kFixed, "mtp k=2"},
                                         {3, ControlMode::kFixed, "mtp k=3"},
                                         {3, ControlMode::kAdaptive, "mtp k<=3 adaptive"}};
  return c;
}

constexpr int64_t kMaxModelLen = 700;

struct Arrival {
  int64_t step;  // engine step at which the request is added
  Request req;
};

inline std::vector<Arrival> random_arrivals(const Qwen35Model& m, int n, uint64_t seed,
                                            bool sampled, int64_t max_prompt = 600) {
  std::mt19937_64 rng(seed);
  std::vector<Arrival> out;
  for (int i = 0; i < n; ++i) {
    Arrival a;
    a.step = static_cast<int64_t>(rng() % 80);
    const int64_t len = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_prompt));
    for (int64_t t = 0; t < len; ++t)
      a.req.prompt.push_back(static_cast<int32_t>(rng() % m.config().vocab_size));
    a.req.max_tokens = 1 + static_cast<int>(rng() % 48);
    a.req.stop_ids = m.config().eos_token_ids;
    if (sampled && i % 2 == 1) {
      a.req.sampling = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 1000u + i};
    }
    out.push_back(std::move(a));
  }
  return out;
}

// Each request alone, without speculation.
inline std::vector<std::vector<int32_t>> solo(Qwen35Model& m,
                                              const std::vector<Arrival>& arrivals) {
  Generator gen(m, nullptr, GeneratorOptions{.max_context = kMaxModelLen});
  std::vector<std::vector<int32_t>> out;
  for (const Arrival& a : arrivals) out.push_back(gen.generate(a.req).tokens);
  return out;
}

// Request 0's prompt is a 200-token prefix (kept at 192 tokens); requests 1..15 add 1..120 tokens
// to it and arrive after it has run; the last request is the next turn of request 5: its prompt,
// its answer and 30 more tokens.
inline std::vector<Arrival> shared_prefix_arrivals(Qwen35Model& m) {
  std::mt19937_64 rng(41);
  const auto token = [&] { return static_cast<int32_t>(rng() % m.config().vocab_size); };
  std::vector<int32_t> base(200);
  for (int32_t& t : base) t = token();
  std::vector<Arrival> out;
  for (int i = 0; i < 16; ++i) {
    Arrival a;
    a.step = i == 0 ? 0 : 12 + static_cast<int64_t>(rng() % 40);
    a.req.prompt = base;
    if (i > 0) {
      for (int64_t j = 0, n = 1 + static_cast<int64_t>(rng() % 120); j < n; ++j) {
        a.req.prompt.push_back(token());
      }
    }
    a.req.max_tokens = 8 + static_cast<int>(rng() % 24);
    a.req.stop_ids = m.config().eos_token_ids;
    out.push_back(std::move(a));
  }
  Generator gen(m, nullptr, GeneratorOptions{.max_context = kMaxModelLen});
  Arrival next;
  next.step = 120;
  next.req = out[5].req;
  for (int32_t t : gen.generate(out[5].req).tokens) next.req.prompt.push_back(t);
  for (int j = 0; j < 30; ++j) next.req.prompt.push_back(token());
  out.push_back(std::move(next));
  return out;
}

struct BatchRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<GenerationStats> stats;  // each request's, as it finished
  EngineCounters counters;
  int64_t max_running = 0;
};

inline BatchRun run_batch(BatchEngine& engine, const std::vector<Arrival>& arrivals,
                          const std::function<void(BatchEngine&, int64_t step)>& each_step = {}) {
  std::map<RequestId, size_t> index;
  BatchRun r;
  r.tokens.resize(arrivals.size());
  r.stats.resize(arrivals.size());
  size_t added = 0;
  std::vector<size_t> order(arrivals.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return arrivals[a].step < arrivals[b].step; });
  for (int64_t step = 0; added < arrivals.size() || !engine.idle(); ++step) {
    while (added < arrivals.size() && arrivals[order[added]].step <= step) {
      index[engine.add(arrivals[order[added]].req)] = order[added];
      ++added;
    }
    if (each_step) each_step(engine, step);
    for (const RequestOutput& o : engine.step()) {
      auto& t = r.tokens[index.at(o.id)];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished) r.stats[index.at(o.id)] = o.stats;
    }
    r.max_running = std::max(r.max_running, engine.running());
  }
  r.counters = engine.counters();
  return r;
}

// The committed states of watched requests (by arrival index) checked bitwise, after every commit
// of a batched run, against the same request run alone (GDN state, conv history and KV).
class StateWatch {
 public:
  using States = std::map<int64_t, std::vector<float>>;  // by n_past after a commit

  static std::vector<float> flat(const Qwen35Model& m, StatePool& pool, const SequenceCache& seq) {
    std::vector<float> out;
    for (const NamedState& s : committed_state(m, pool, seq, /*with_mtp_kv=*/false))
      out.insert(out.end(), s.values.begin(), s.values.end());
    return out;
  }

  // Runs each watched request alone (its tokens must be reference's) for its states.
  StateWatch(Qwen35Model& m, const std::vector<Arrival>& arrivals, std::vector<size_t> watched,
             const std::vector<std::vector<int32_t>>& reference)
      : m_(m) {
    for (size_t w : watched) {
      Generator gen(m, nullptr, GeneratorOptions{.max_context = kMaxModelLen});
      gen.after_commit = [&](int64_t, int64_t n_past) {
        solo_[w][n_past] = flat(m, gen.engine().pool(), gen.engine().cache(gen.current()));
      };
      EXPECT_EQ(gen.generate(arrivals[w].req).tokens, reference[w]) << "watched request " << w;
    }
    // Request ids follow the order of add() (run_batch adds by arrival step).
    std::vector<size_t> order(arrivals.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return arrivals[a].step < arrivals[b].step; });
    for (size_t i = 0; i < order.size(); ++i) {
      if (solo_.count(order[i])) ids_[static_cast<RequestId>(i)] = order[i];
    }
  }

  // Checks engine's watched sequences at each commit from now on (checks(), differing()).
  void attach(BatchEngine& engine) {
    checks_ = differing_ = 0;
    engine.after_commit = [this, &engine](RequestId id, int64_t, int64_t n_past) {
      const auto w = ids_.find(id);
      if (w == ids_.end()) return;
      const States& st = solo_[w->second];
      const auto it = st.find(n_past);
      // Only the last step may commit past the solo run's end (tokens after a stop are dropped).
      if (it == st.end()) {
        EXPECT_GT(n_past, st.rbegin()->first) << "n_past " << n_past;
        return;
      }
      const std::vector<float> s = flat(m_, engine.pool(), engine.cache(id));
      ++checks_;
      differing_ += s.size() != it->second.size() ||
                    std::memcmp(s.data(), it->second.data(), s.size() * sizeof(float)) != 0;
    };
  }
  int checks() const { return checks_; }
  int differing() const { return differing_; }

 private:
  Qwen35Model& m_;
  std::map<size_t, States> solo_;
  std::map<RequestId, size_t> ids_;
  int checks_ = 0, differing_ = 0;
};

inline BatchEngineOptions batch_options(int k, ControlMode control, int64_t max_seqs = 16,
                                        int64_t budget = 256) {
  return BatchEngineOptions{.num_speculative_tokens = k,
                            .control = control,
                            .max_num_seqs = max_seqs,
                            .max_num_batched_tokens = budget,
                            .max_model_len = kMaxModelLen};
}

inline int mismatches(const std::vector<std::vector<int32_t>>& a,
                      const std::vector<std::vector<int32_t>>& b, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    ++bad;
    ADD_FAILURE() << what << ": request " << i << " differs from its solo run";
  }
  return bad;
}

}  // namespace tandem::testing
