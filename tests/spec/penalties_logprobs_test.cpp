// Penalties, logit bias and logprobs (issue 15's request fields, computed in the engine): the
// penalty arithmetic against a hand computation in vLLM's order, logprobs against a direct
// log-softmax, and under load they stay exact: penalised or biased greedy and sampled requests
// emit the same tokens, and every request the same logprobs bit for bit, with and without MTP,
// batched or alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "batch_support.h"
#include "spec/logprobs.h"
#include "spec/mtp_drafter.h"
#include "spec/penalties.h"
#include "test_support.h"

namespace tandem {
namespace {

using namespace testing;

TEST(Penalties, RepetitionThenFrequencyAndPresenceAsVllm) {
  const SamplingParams p{
      .presence_penalty = 0.5f, .frequency_penalty = 0.25f, .repetition_penalty = 2.f};
  const std::vector<int32_t> prompt{1, 2};
  PenaltyState st(p, prompt);
  st.add(2);
  st.add(3);
  st.add(3);
  std::vector<float> row{1.f, 4.f, -2.f, 6.f, 8.f, -1.f};
  st.apply(row.data(), 6, std::vector<int32_t>{5});     // a pending draft: token 5 once more
  EXPECT_EQ(row[0], 1.f);                               // never seen
  EXPECT_EQ(row[1], 2.f);                               // prompt only: 4 / 2
  EXPECT_EQ(row[2], -2.f * 2.f - (0.25f + 0.5f));       // prompt and output once
  EXPECT_EQ(row[3], 6.f / 2.f - (0.25f * 2.f + 0.5f));  // output twice
  EXPECT_EQ(row[4], 8.f);
  EXPECT_EQ(row[5], -1.f * 2.f - (0.25f + 0.5f));  // the pending draft counts as output
  // Without the repetition penalty the prompt changes nothing; repeated drafts count each time.
  PenaltyState no_rep({.presence_penalty = 0.5f, .frequency_penalty = 0.25f}, prompt);
  no_rep.add(3);
  no_rep.add(3);
  std::vector<float> r2{1.f, 4.f, -2.f, 6.f, 8.f, -1.f, 2.f};
  no_rep.apply(r2.data(), 7, std::vector<int32_t>{3, 6, 3, 6, 9});  // 9: outside the vocabulary
  EXPECT_EQ(r2[1], 4.f);
  EXPECT_EQ(r2[2], -2.f);
  EXPECT_EQ(r2[3], 6.f - (0.25f * 4.f + 0.5f));
  EXPECT_EQ(r2[6], 2.f - (0.25f * 2.f + 0.5f));
  EXPECT_EQ(r2[0], 1.f);
}

TEST(Penalties, LogitBiasComesBeforeThePenalties) {
  SamplingParams p{.repetition_penalty = 2.f};
  p.logit_bias = {{0, 3.f}, {1, -10.f}, {9, 1.f}};  // 9: outside this row, ignored
  PenaltyState st(p, std::vector<int32_t>{1});
  std::vector<float> row{1.f, 4.f, 2.f};
  st.apply(row.data(), 3, {});
  EXPECT_EQ(row[0], 4.f);                 // biased only
  EXPECT_EQ(row[1], (4.f - 10.f) * 2.f);  // biased to -6, then the prompt's repetition penalty
  EXPECT_EQ(row[2], 2.f);
}

TEST(Penalties, RangesAreChecked) {
  EXPECT_THROW(check_sampling_params({.presence_penalty = 2.5f}), Error);
  EXPECT_THROW(check_sampling_params({.frequency_penalty = -3.f}), Error);
  EXPECT_THROW(check_sampling_params({.repetition_penalty = 0.f}), Error);
  EXPECT_THROW(check_sampling_params({.repetition_penalty = NAN}), Error);
  EXPECT_NO_THROW(check_sampling_params({.presence_penalty = -2.f, .repetition_penalty = 2.f}));
  SamplingParams b;
  b.logit_bias = {{3, 100.5f}};
  EXPECT_THROW(check_sampling_params(b), Error);
  b.logit_bias = {{-1, 1.f}};
  EXPECT_THROW(check_sampling_params(b), Error);
  b.logit_bias = {{3, -100.f}};
  EXPECT_NO_THROW(check_sampling_params(b));
}

TEST(Logprobs, MatchALogSoftmaxAndOrderTopTokens) {
  const std::vector<float> row{0.5f, 2.f, -1.f, 2.f, 0.f};
  const TokenLogprobs lp = token_logprobs(row.data(), 5, 2, 3);
  double sum = 0;
  for (float x : row) sum += std::exp(static_cast<double>(x));
  EXPECT_NEAR(lp.chosen.logprob, -1.0 - std::log(sum), 1e-6);
  EXPECT_EQ(lp.chosen.id, 2);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].id, 1);  // the tie at 2.0 goes to the smaller id
  EXPECT_EQ(lp.top[1].id, 3);
  EXPECT_EQ(lp.top[2].id, 0);
  EXPECT_EQ(lp.top[0].logprob, lp.top[1].logprob);
  // Ranks count the tokens with a strictly higher logit: the tie at 2.0 shares rank 1.
  EXPECT_EQ(lp.chosen.rank, 5);
  EXPECT_EQ(lp.top[0].rank, 1);
  EXPECT_EQ(lp.top[1].rank, 1);
  EXPECT_EQ(lp.top[2].rank, 3);
  // Against a full sort on a row with many ties (values in steps of 1/8).
  std::vector<float> many(1000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<float>((i * 7919) % 37) / 8.f;
  std::vector<int32_t> order(many.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return many[a] > many[b]; });
  const TokenLogprobs top = token_logprobs(many.data(), 1000, 0, kMaxTopLogprobs);
  ASSERT_EQ(top.top.size(), static_cast<size_t>(kMaxTopLogprobs));
  for (int i = 0; i < kMaxTopLogprobs; ++i) {
    EXPECT_EQ(top.top[i].id, order[i]) << i;
    const auto above =
        std::count_if(many.begin(), many.end(), [&](float x) { return x > many[order[i]]; });
    EXPECT_EQ(top.top[i].rank, above + 1) << i;
  }
  const auto above_0 =
      std::count_if(many.begin(), many.end(), [&](float x) { return x > many[0]; });
  EXPECT_EQ(top.chosen.rank, above_0 + 1);
  EXPECT_THROW(token_logprobs(row.data(), 5, 7, 1), Error);
  EXPECT_THROW(token_logprobs(row.data(), 5, 0, kMaxTopLogprobs + 1), Error);
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs, prompt_logprobs;
  int prompt_deliveries = 0;  // outputs that carried prompt logprobs
};

std::vector<Outcome> run_all(Qwen35Model& m, const std::vector<Request>& reqs, int k,
                             int64_t max_seqs) {
  BatchEngine engine(m, k > 0 ? std::make_unique<MtpDrafter>(m) : nullptr,
                     batch_options(k, ControlMode::kFixed, max_seqs));
  std::map<RequestId, size_t> index;
  for (size_t i = 0; i < reqs.size(); ++i) index[engine.add(reqs[i])] = i;
  std::vector<Outcome> out(reqs.size());
  while (!engine.idle()) {
    for (RequestOutput& o : engine.step()) {
      Outcome& r = out[index.at(o.id)];
      EXPECT_EQ(o.logprobs.size(), reqs[index.at(o.id)].logprobs >= 0 ? o.new_tokens.size() : 0u);
      r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      r.logprobs.insert(r.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      if (!o.prompt_logprobs.empty()) {
        r.prompt_logprobs = o.prompt_logprobs;
        ++r.prompt_deliveries;
      }
    }
  }
  return out;
}

bool same_bits(const std::vector<TokenLogprobs>& a, const std::vector<TokenLogprobs>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].chosen.id != b[i].chosen.id || a[i].chosen.logprob != b[i].chosen.logprob ||
        a[i].chosen.rank != b[i].chosen.rank || a[i].top.size() != b[i].top.size())
      return false;
    for (size_t j = 0; j < a[i].top.size(); ++j) {
      if (a[i].top[j].id != b[i].top[j].id || a[i].top[j].logprob != b[i].top[j].logprob ||
          a[i].top[j].rank != b[i].top[j].rank)
        return false;
    }
  }
  return true;
}

TEST(Penalties, PenalisedAndLogprobRequestsAreExactUnderSpeculationAndBatching) {
  auto model = load_fixture(kTrainedModel, 256);
  std::vector<Arrival> arrivals = random_arrivals(*model, 12, 31, /*sampled=*/true, 120);
  std::vector<Request> reqs, unpenalised;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    Request r = arrivals[i].req;
    r.max_tokens = 24;
    r.stop_ids.clear();
    r.logprobs = static_cast<int>(i % 4) - 1;  // off, 0, 1, 2 top tokens
    unpenalised.push_back(r);
    r.sampling.presence_penalty = i % 3 == 0 ? 1.5f : 0.f;
    r.sampling.frequency_penalty = i % 3 == 1 ? 1.f : 0.f;
    r.sampling.repetition_penalty = i % 3 == 2 ? 1.8f : 1.f;
    // A third of them biased too (a token pushed up by 8).
    if (i % 3 == 1) r.sampling.logit_bias = {{static_cast<int32_t>(100 + i), 8.f}};
    reqs.push_back(r);
  }
  const std::vector<Outcome> plain_solo = run_all(*model, reqs, 0, 1);
  int changed = 0;
  const std::vector<Outcome> free = run_all(*model, unpenalised, 0, 8);
  for (size_t i = 0; i < reqs.size(); ++i) changed += free[i].tokens != plain_solo[i].tokens;
  EXPECT_GE(changed, 4) << "penalties changed too few outputs to be tested";
  for (int k : {0, 1, 3}) {
    const std::vector<Outcome> got = run_all(*model, reqs, k, 8);
    int bad = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(got[i].tokens, plain_solo[i].tokens) << "k=" << k << " request " << i;
      EXPECT_TRUE(same_bits(got[i].logprobs, plain_solo[i].logprobs))
          << "k=" << k << " request " << i << ": logprobs differ";
      bad += got[i].tokens != plain_solo[i].tokens;
    }
    std::printf(
        "[penalties] k=%d: 12 requests (6 sampled, 9 with logprobs, 4 biased), %d differ from "
        "solo plain; penalties and biases changed %d of 12 outputs\n",
        k, bad, changed);
  }
  // Greedy without penalties: the chosen token is the most likely one.
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!unpenalised[i].sampling.greedy() || unpenalised[i].logprobs < 1) continue;
    for (const TokenLogprobs& lp : free[i].logprobs) EXPECT_EQ(lp.chosen.id, lp.top[0].id);
  }
}

// A +100 bias makes greedy decoding emit that token every time; -100 on the unbiased output's
// first token removes it; both equal under MTP.
// A greedy request of the prompt 1..5 and its output without bias, penalties or stop ids.
Request greedy_base(int max_tokens) {
  Request base;
  base.prompt = {1, 2, 3, 4, 5};
  base.max_tokens = max_tokens;
  return base;
}

TEST(Penalties, LogitBiasSteersGreedyOutputAlsoUnderSpeculation) {
  auto model = load_fixture(kTrainedModel, 256);
  const Request base = greedy_base(12);
  const std::vector<int32_t> free = run_all(*model, {base}, 0, 1)[0].tokens;
  Request up = base, out = base;
  up.sampling.logit_bias = {{777, 100.f}};
  out.sampling.logit_bias = {{free[0], -100.f}};
  for (int k : {0, 3}) {
    const std::vector<Outcome> got = run_all(*model, {up, out}, k, 2);
    EXPECT_EQ(got[0].tokens, std::vector<int32_t>(12, 777)) << "k=" << k;
    EXPECT_NE(got[1].tokens[0], free[0]) << "k=" << k;
    EXPECT_EQ(got[1].tokens, run_all(*model, {out}, 0, 1)[0].tokens) << "k=" << k;
  }
}

// min_tokens: the stop ids are -inf while the row chooses one of the first min_tokens output
// tokens, counting the committed ones and the pending drafts.
TEST(Penalties, MinTokensMasksTheStopIdsUntilEnoughAreOutput) {
  const std::vector<int32_t> stops{2, 4, 9};  // 9: outside this row, ignored
  PenaltyState st({.min_tokens = 3}, {}, stops);
  const std::vector<float> fresh{1.f, 2.f, 3.f, 4.f, 5.f};
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> masked{1.f, 2.f, ninf, 4.f, ninf};
  std::vector<float> row = fresh;
  st.apply(row.data(), 5, {});  // output token 0
  EXPECT_EQ(row, masked);
  st.add(1);
  row = fresh;
  st.apply(row.data(), 5, std::vector<int32_t>{3});  // token 2: one committed, one pending
  EXPECT_EQ(row, masked);
  row = fresh;
  st.apply(row.data(), 5, std::vector<int32_t>{3, 0});  // token 3: free
  EXPECT_EQ(row, fresh);
  st.add(3);
  st.add(0);
  row = fresh;
  st.apply(row.data(), 5, {});
  EXPECT_EQ(row, fresh);
  EXPECT_THROW(check_sampling_params({.min_tokens = -1}), Error);
}

// A greedy request whose output would stop at once on a stop id runs on to min_tokens, the same
// bits batched, alone and under MTP; a sampled one too. Its first min_tokens tokens are what a
// -100 bias on the stop ids gives (the -inf of the mask and -100 choose alike here).
TEST(Penalties, MinTokensRunsPastEarlyStopsAlsoUnderSpeculation) {
  auto model = load_fixture(kTrainedModel, 256);
  const Request base = greedy_base(16);
  const std::vector<int32_t> free = run_all(*model, {base}, 0, 1)[0].tokens;
  // The first token of the free output unlike the first one: a stop id ends it there.
  size_t j = 1;
  while (j < free.size() && free[j] == free[0]) ++j;
  ASSERT_LT(j + 1, 9u) << "the free output repeats its first token too long for this test";
  Request early = base;
  early.stop_ids = {free[j], 8191};
  const std::vector<Outcome> stopped = run_all(*model, {early}, 0, 1);
  ASSERT_EQ(stopped[0].tokens.size(), j + 1);
  Request held = early, sampled = early, biased = base;
  held.sampling.min_tokens = 9;
  sampled.sampling = {.temperature = 0.9f, .seed = 77, .min_tokens = 9};
  for (int32_t t : early.stop_ids) biased.sampling.logit_bias.push_back({t, -100.f});
  const std::vector<int32_t> steered = run_all(*model, {biased}, 0, 1)[0].tokens;
  const std::vector<Outcome> solo = run_all(*model, {held, sampled}, 0, 1);
  for (const Outcome& o : solo) {
    ASSERT_GE(o.tokens.size(), 9u);
    for (size_t i = 0; i < 9; ++i) {
      EXPECT_EQ(std::count(early.stop_ids.begin(), early.stop_ids.end(), o.tokens[i]), 0) << i;
    }
    // Past min_tokens a stop id ends it as usual.
    if (o.tokens.size() < 16) {
      EXPECT_EQ(std::count(early.stop_ids.begin(), early.stop_ids.end(), o.tokens.back()), 1);
    }
  }
  EXPECT_EQ(std::vector<int32_t>(solo[0].tokens.begin(), solo[0].tokens.begin() + 9),
            std::vector<int32_t>(steered.begin(), steered.begin() + 9));
  for (int k : {0, 1, 3}) {
    const std::vector<Outcome> got = run_all(*model, {held, early, sampled, base}, k, 4);
    EXPECT_EQ(got[0].tokens, solo[0].tokens) << "k=" << k;
    EXPECT_EQ(got[1].tokens, stopped[0].tokens) << "k=" << k;
    EXPECT_EQ(got[2].tokens, solo[1].tokens) << "k=" << k;
    EXPECT_EQ(got[3].tokens, free) << "k=" << k;
  }
}

TEST(Logprobs, OutOfRangeIsRejected) {
  auto model = load_fixture(kTrainedModel, 256);
  BatchEngine engine(*model, nullptr, batch_options(0, ControlMode::kFixed, 2));
  Request r{.prompt = {1, 2, 3}, .max_tokens = 2, .logprobs = 21};
  EXPECT_THROW(engine.add(r), Error);
  r.logprobs = -1;
  r.prompt_logprobs = 21;
  EXPECT_THROW(engine.add(r), Error);
}

// Prompt logprobs (echo): every prompt token after the first, scored from the row before it, in
// batches with other requests and under speculation, equal bit for bit what the teacher-forced
// prefill of the prompt alone gives (BatchEngine::score, whose chunks are larger), come once with
// the first token, and change no output.
TEST(Logprobs, PromptLogprobsAreTheTeacherForcedScoresAndChangeNoOutput) {
  auto model = load_fixture(kTrainedModel, 256);
  const std::vector<Arrival> arrivals = random_arrivals(*model, 8, 47, /*sampled=*/true, 200);
  std::vector<Request> plain, echo;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    Request r = arrivals[i].req;
    r.max_tokens = 12;
    plain.push_back(r);
    r.prompt_logprobs = static_cast<int>(i % 3);  // 0, 1, 2 top tokens
    echo.push_back(r);
  }
  // The reference: each prompt scored alone.
  BatchEngine scorer(*model, nullptr, batch_options(0, ControlMode::kFixed, 1));
  const int64_t vocab = model->config().vocab_size;
  std::vector<std::vector<TokenLogprobs>> want(echo.size());
  int64_t scored = 0, multi_chunk = 0;
  for (size_t i = 0; i < echo.size(); ++i) {
    const std::vector<int32_t>& ids = echo[i].prompt;
    const Tensor rows = scorer.score(ids);
    for (size_t j = 0; j + 1 < ids.size(); ++j) {
      want[i].push_back(token_logprobs(rows.data<const float>() + j * rows.stride(0), vocab,
                                       ids[j + 1], echo[i].prompt_logprobs));
    }
    scored += static_cast<int64_t>(want[i].size());
    multi_chunk += ids.size() > 64;
  }
  EXPECT_GE(multi_chunk, 2) << "too few prompts span several 64-row chunks";
  const std::vector<Outcome> base = run_all(*model, plain, 0, 1);
  for (int k : {0, 3}) {
    const std::vector<Outcome> got = run_all(*model, echo, k, 4);
    for (size_t i = 0; i < echo.size(); ++i) {
      EXPECT_EQ(got[i].tokens, base[i].tokens) << "k=" << k << " request " << i;
      EXPECT_EQ(got[i].prompt_deliveries, echo[i].prompt.size() > 1 ? 1 : 0) << i;
      EXPECT_TRUE(same_bits(got[i].prompt_logprobs, want[i]))
          << "k=" << k << " request " << i << ": prompt logprobs differ from the scores";
      for (const TokenLogprobs& t : got[i].prompt_logprobs) {
        EXPECT_EQ(t.top.size(), static_cast<size_t>(echo[i].prompt_logprobs));
      }
    }
  }
  std::printf(
      "[prompt logprobs] 8 requests, %lld prompt tokens scored (%lld prompts over 64 "
      "tokens), equal to the teacher-forced scores at k = 0, 3\n",
      static_cast<long long>(scored), static_cast<long long>(multi_chunk));
}

}  // namespace
}  // namespace tandem
