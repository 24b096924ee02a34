// Sampling: seeded runs are reproducible, speculative sampling emits exactly what plain sampling
// emits (the coupled acceptance rule, acceptance.h), and on a small vocabulary the emitted tokens
// have the target's distribution: chi-square goodness of fit over many seeds, threshold = the
// 0.1% critical value.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "engine/generator.h"
#include "kernels/argmax/argmax.h"
#include "spec/acceptance.h"
#include "spec/mtp_drafter.h"
#include "test_support.h"

namespace tandem {
namespace {

// Chi-square critical values at p = 0.001 for 1..8 degrees of freedom.
constexpr double kChi2Critical[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12};

double chi_square(const std::vector<int64_t>& observed, const std::vector<float>& p, int* dof) {
  int64_t total = 0;
  for (int64_t o : observed) total += o;
  double chi = 0;
  *dof = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) {
      EXPECT_EQ(observed[i], 0) << "token " << i << " has zero probability but was emitted";
      continue;
    }
    const double e = static_cast<double>(total) * p[i];
    chi += (observed[i] - e) * (observed[i] - e) / e;
    ++*dof;
  }
  return chi;
}

struct Case {
  SamplingParams params;
  std::vector<int32_t> drafts;
};

TEST(Sampling, SpeculativeAcceptanceEmitsTheTargetDistribution) {
  constexpr int64_t kVocab = 8, kTrials = 40000;
  const float logits_rows[3][kVocab] = {{1.0f, 0.2f, 2.0f, -1.f, 0.5f, 0.f, 1.5f, -0.5f},
                                        {0.3f, 1.2f, -0.2f, 0.8f, 0.f, 2.1f, -1.f, 0.4f},
                                        {0.f, 0.f, 1.f, 1.f, 2.f, -2.f, 0.5f, 0.5f}};
  Tensor logits = Tensor::zeros({3, kVocab}, DType::kF32);
  std::memcpy(logits.data<float>(), logits_rows, sizeof(logits_rows));
  const std::vector<Case> cases{{{.temperature = 1.f}, {2, 5}},
                                {{.temperature = 0.7f, .top_k = 5}, {6, 1}},
                                {{.temperature = 1.3f, .top_p = 0.8f}, {0, 5}}};
  for (const Case& c : cases) {
    std::vector<int64_t> first(kVocab, 0), second(kVocab, 0), plain(kVocab, 0);
    const std::vector<float> p0 = target_distribution(logits_rows[0], kVocab, c.params);
    const std::vector<float> p1 = target_distribution(logits_rows[1], kVocab, c.params);
    for (int64_t t = 0; t < kTrials; ++t) {
      SamplingParams p = c.params;
      p.seed = static_cast<uint64_t>(t);  // one request per trial
      const Verdict v = accept_sampled(logits, c.drafts, p, 100);
      ++first[v.emitted[0]];
      if (v.emitted.size() >= 2) ++second[v.emitted[1]];  // given the first draft was accepted
      ++plain[draw(p0, uniform_at(1000000 + static_cast<uint64_t>(t), 100))];
    }
    int dof;
    const double chi_first = chi_square(first, p0, &dof);
    EXPECT_LT(chi_first, kChi2Critical[dof]) << "first token, T=" << c.params.temperature;
    const double chi_plain = chi_square(plain, p0, &dof);
    EXPECT_LT(chi_plain, kChi2Critical[dof]) << "plain sampling";
    const double chi_second = chi_square(second, p1, &dof);
    EXPECT_LT(chi_second, kChi2Critical[dof]) << "second token";
    std::printf(
        "[chi2] T=%.1f top_k=%d top_p=%.1f: first %.2f, second %.2f, plain %.2f (critical %.2f at "
        "dof %d)\n",
        c.params.temperature, c.params.top_k, c.params.top_p, chi_first, chi_second, chi_plain,
        kChi2Critical[dof], dof);
  }
}

// Greedy acceptance from argmax ids (what the generator computes on the device) gives the same
// verdict as greedy acceptance from the logits rows, over random rows with ties and every
// accept/reject pattern of 0..4 drafts.
TEST(Sampling, GreedyFromIdsEqualsGreedyFromLogits) {
  constexpr int64_t kVocab = 6;
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> level(0, 3);  // few levels: ties are common
  int checked = 0, partial = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int k = trial % 5;
    Tensor logits = Tensor::zeros({k + 1, kVocab}, DType::kF32);
    std::vector<int32_t> ids;
    for (int j = 0; j <= k; ++j) {
      for (int64_t v = 0; v < kVocab; ++v) logits.data<float>()[j * kVocab + v] = level(rng);
      ids.push_back(kernels::ref::argmax_row(logits.data<float>() + j * kVocab, kVocab));
    }
    std::vector<int32_t> drafts;
    for (int j = 0; j < k; ++j) {  // agree with the target for a while, then maybe not
      drafts.push_back(j < trial % 4 ? ids[j] : static_cast<int32_t>(rng() % kVocab));
    }
    const Verdict a = accept_sampled(logits, drafts, SamplingParams{}, 0);
    const Verdict b = accept_greedy(ids, drafts);
    EXPECT_EQ(a.n_acc, b.n_acc) << "trial " << trial;
    EXPECT_EQ(a.emitted, b.emitted) << "trial " << trial;
    EXPECT_EQ(a.target_tokens, b.target_tokens) << "trial " << trial;
    partial += b.n_acc > 1 && b.n_acc <= k;
    ++checked;
  }
  EXPECT_EQ(checked, 400);
  EXPECT_GT(partial, 20);  // the trials did exercise partial accepts
  EXPECT_THROW(accept_greedy(std::vector<int32_t>{1, 2}, std::vector<int32_t>{1, 2}), Error);
}

TEST(Sampling, SeededRunsAreReproducible) {
  auto model = testing::load_fixture("tiny-text");
  const SamplingParams params{.temperature = 0.8f, .top_k = 50, .top_p = 0.95f, .seed = 7};
  auto run = [&](int k, uint64_t seed, std::vector<int32_t> draft_vocab = {}) {
    SamplingParams p = params;
    p.seed = seed;
    std::unique_ptr<Drafter> d;
    if (k > 0) d = std::make_unique<MtpDrafter>(*model, std::move(draft_vocab));
    Generator gen(*model, std::move(d),
                  GeneratorOptions{.num_speculative_tokens = k, .max_context = 256});
    return gen.generate(GenerateRequest{.prompt = {1, 2, 3}, .max_tokens = 32, .sampling = p})
        .tokens;
  };
  EXPECT_EQ(run(0, 7), run(0, 7));
  EXPECT_EQ(run(3, 7), run(3, 7));
  EXPECT_NE(run(0, 7), run(0, 8));
  // The coupled rule: speculative sampling emits exactly what plain sampling emits.
  EXPECT_EQ(run(3, 7), run(0, 7));
  EXPECT_EQ(run(1, 8), run(0, 8));
  // With a draft vocabulary (--speculative-token-map) too: drafts only decide what is accepted.
  std::vector<int32_t> low_ids(static_cast<size_t>(model->config().vocab_size / 4));
  std::iota(low_ids.begin(), low_ids.end(), 0);
  EXPECT_EQ(run(3, 7, low_ids), run(0, 7));
}

// min_p keeps the tokens whose probability is at least min_p times the largest one's, before
// top-k and top-p (vLLM's order); min_p = 1 leaves the argmax alone.
TEST(Sampling, MinPKeepsTokensNearTheMostLikelyOne) {
  const std::vector<float> logits{0.f, 2.f, -1.f, 1.f};  // p / p_max: e^-2, 1, e^-3, e^-1
  const auto dist = [&](float min_p, float top_p = 1.f) {
    return target_distribution(logits.data(), 4,
                               {.temperature = 1.f, .top_p = top_p, .min_p = min_p});
  };
  const std::vector<float> d = dist(0.2f);  // keeps 2 (1) and 4 (e^-1 = 0.37)
  const double z = 1.0 + std::exp(-1.0);
  EXPECT_FLOAT_EQ(d[1], static_cast<float>(1.0 / z));
  EXPECT_FLOAT_EQ(d[3], static_cast<float>(std::exp(-1.0) / z));
  EXPECT_EQ(d[0], 0.f);
  EXPECT_EQ(d[2], 0.f);
  EXPECT_EQ(dist(1.f), (std::vector<float>{0.f, 1.f, 0.f, 0.f}));
  EXPECT_EQ(dist(0.f), target_distribution(logits.data(), 4, {.temperature = 1.f}));
  EXPECT_EQ(dist(0.1f, 0.5f), (std::vector<float>{0.f, 1.f, 0.f, 0.f}));  // then top-p
  EXPECT_THROW(check_sampling_params({.min_p = 1.5f}), Error);
  EXPECT_THROW(check_sampling_params({.min_p = -0.1f}), Error);
}

// Position-keyed draws: a token's uniform number depends only on (seed, position).
TEST(Sampling, UniformNumbersDependOnSeedAndPositionOnly) {
  EXPECT_EQ(uniform_at(7, 100), uniform_at(7, 100));
  EXPECT_NE(uniform_at(7, 100), uniform_at(7, 101));
  EXPECT_NE(uniform_at(7, 100), uniform_at(8, 100));
  double sum = 0;
  for (int64_t p = 0; p < 100000; ++p) {
    const double u = uniform_at(3, p);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
}

}  // namespace
}  // namespace tandem
