// Speculation control: with simulated step costs it picks k = 0 when drafts are never accepted
// (or when the drafter's first pass makes drafting a loss) and k_max when they nearly always are;
// and greedy output under adaptive control is still bit-identical to plain decoding (k changes
// from step to step).
#include "spec/speculation_control.h"

#include <gtest/gtest.h>

#include <random>

#include "engine/generator.h"
#include "spec/mtp_drafter.h"
#include "test_support.h"

namespace tandem {
namespace {

// Runs the controller against a model of the world: a step with k drafts costs 1 + per_draft k,
// and each draft is accepted with probability p. Returns steps per k; *rate gets tokens per unit
// cost.
std::vector<int64_t> simulate(double p, int k_max, int steps, double* rate = nullptr,
                              double per_draft = 0.15) {
  SpeculationControl c(k_max, ControlMode::kAdaptive);
  std::mt19937_64 rng(3);
  std::bernoulli_distribution accept(p);
  double tokens = 0, cost = 0;
  for (int s = 0; s < steps; ++s) {
    const int k = c.choose();
    int n_acc = 1;
    while (n_acc <= k && accept(rng)) ++n_acc;
    const double step = 1.0 + per_draft * k;
    c.record(k, n_acc, step);
    tokens += n_acc;
    cost += step;
  }
  if (rate) *rate = tokens / cost;
  return c.steps_per_k();
}

TEST(SpeculationControl, TurnsSpeculationOffWhenDraftsFail) {
  const auto steps = simulate(0.0, 3, 400);
  EXPECT_GT(steps[0], 350) << "k=0 steps";
}

TEST(SpeculationControl, NeverTriesALargerKOnceASmallerOneLost) {
  // Exploration climbs from k = 0: when k = 1 is worse than plain decoding (drafts cost 0.6 of a
  // step and are never accepted), the costlier k = 2 and k = 3 steps are never taken.
  const auto steps = simulate(0.0, 3, 400, nullptr, 0.6);
  EXPECT_EQ(steps[2], 0) << "k=2 steps";
  EXPECT_EQ(steps[3], 0) << "k=3 steps";
}

TEST(SpeculationControl, UsesAllDraftsWhenTheyAreAccepted) {
  const auto steps = simulate(0.9, 3, 400);
  EXPECT_GT(steps[3], 350) << "k=3 steps";
}

TEST(SpeculationControl, NearTheBestRateWhenTheOptimumIsFlat) {
  // p = 0.5: E_k = 1, 1.5, 1.75, 1.875; E_k / (1 + 0.15 k) = 1, 1.304, 1.346, 1.293: k = 2 is best
  // by 3%, so any k > 0 is nearly as good; the achieved rate must be within 5% of the best and
  // well above plain decoding (1.0).
  double rate = 0;
  simulate(0.5, 3, 2000, &rate);
  EXPECT_GT(rate, 0.95 * 1.346);
}

// A world with the MTP drafter's lazy first pass: a step with k drafts costs 1 + 0.08 k, plus
// draft_cost per chained draft after the first and, when k > 0, one first pass (pass_fixed +
// pass_per_row per row) over every row not yet passed, those of earlier k = 0 steps included.
// A k = 0 step pays no first pass; the first drafting step after k = 0 steps reports the pass over
// all but the last step's row as catch-up, as Generator does. Returns tokens per unit cost.
double simulate_lazy_first_pass(double p, double pass_fixed, double draft_cost,
                                std::vector<int64_t>* steps_per_k, int steps = 2000,
                                double pass_per_row = 0.01, double cold = 1.0,
                                int rejected_first = 0) {
  constexpr int kMax = 3;
  SpeculationControl c(kMax, ControlMode::kAdaptive);
  std::mt19937_64 rng(3);
  std::bernoulli_distribution accept(p);
  double tokens = 0, cost = 0;
  int64_t pending = 0;  // rows awaiting the first pass
  int prev_k = -1;
  std::vector<bool> used(kMax + 1, false);
  int drafting = 0;
  for (int s = 0; s < steps; ++s) {
    const int k = c.choose();
    int n_acc = 1;
    while (n_acc <= k && drafting >= rejected_first && accept(rng)) ++n_acc;
    drafting += k > 0;
    // One-time costs (caches, first replays) scale the first step and each k's first step.
    double step = (1.0 + 0.08 * k) * (s < 1 || !used[k] ? cold : 1.0), catch_up = 0.0;
    used[k] = true;
    if (k > 0) {
      if (prev_k == 0 && pending > 1) {
        catch_up = pass_fixed + pass_per_row * static_cast<double>(pending - 1);
        pending = 1;
      }
      const double pass = pending > 0 ? pass_fixed + pass_per_row * pending : 0.0;
      step += draft_cost * (k - 1) + pass + catch_up;
      pending = 0;
    }
    pending += n_acc;
    prev_k = k;
    c.record(k, n_acc, step, catch_up);
    tokens += n_acc;
    cost += step;
  }
  *steps_per_k = c.steps_per_k();
  return tokens / cost;
}

TEST(SpeculationControl, PlainWhenTheFirstPassMakesDraftingALoss) {
  // p = 0.45 with a first pass of fixed cost 0.6 (launch-bound, as the shipped model on a GPU):
  // k = 1 yields 1.45 tokens for about 1.69, worse than plain decoding's 1 per 1. Charging k = 0
  // steps a share of the first pass (the old rule) made k = 1 look better and ran at 0.86.
  std::vector<int64_t> steps;
  const double rate = simulate_lazy_first_pass(0.45, 0.6, 0.3, &steps);
  EXPECT_GT(rate, 0.95) << "tokens per unit cost; plain decoding gives 1.0";
  EXPECT_GT(steps[0], 1800) << "k=0 steps of 2000";
}

TEST(SpeculationControl, SpeculatesWhenItPaysDespiteCatchingUp) {
  // p = 0.8, cheap drafts: k = 3 yields 2.95 tokens for about 1.6; the catch-up after each probe of
  // k = 0 must not keep the controller away from it.
  std::vector<int64_t> steps;
  const double rate = simulate_lazy_first_pass(0.8, 0.05, 0.1, &steps);
  EXPECT_GT(rate, 1.8) << "tokens per unit cost";
  EXPECT_GT(steps[3], 1800) << "k=3 steps of 2000";
}

TEST(SpeculationControl, ResumesDraftingAfterCostlyCatchUpsAndColdSteps) {
  // Modelled on a --spec-trace of the shipped model on the CPU: drafts pay (p = 0.85), the first
  // step and each k's first step cost 2.2 times a warm one (cold caches, first replays), the first
  // two drafting steps accept nothing, and a catch-up after k = 0 steps costs 0.1 of a step per
  // row. Averaging cold first samples in and charging catch-ups to the probing step kept the
  // previous controller at k = 1 for the whole 60 steps (1.26 tokens per unit cost); k = 3 gives
  // about 1.5.
  std::vector<int64_t> steps;
  const double rate = simulate_lazy_first_pass(0.85, 0.1, 0.1, &steps, 60, 0.1, 2.2, 2);
  EXPECT_GT(steps[3], 30) << "k=3 steps of 60";
  EXPECT_GT(rate, 1.4) << "tokens per unit cost; plain decoding gives about 1.0";
}

// The batched case of the shipped model on the H200 (256 x 400 tokens, 64 and 256 sequences):
// a k = 1 step costs about what its extra tokens are worth (1.95 tokens for 1.9-2.1 times a plain
// step) and step costs are noisy. Ties must go to plain decoding: choosing k = 1 on noise, and
// probing it every 32 steps, ran 4-8% slower than plain.
TEST(SpeculationControl, TiesGoToPlainDecoding) {
  for (double per_draft : {0.95, 1.0, 1.05}) {
    SpeculationControl c(3, ControlMode::kAdaptive);
    std::mt19937_64 rng(7);
    std::bernoulli_distribution accept(0.95);
    std::uniform_real_distribution<double> noise(0.9, 1.1);
    double tokens = 0, cost = 0;
    const int steps = 1500;
    for (int s = 0; s < steps; ++s) {
      const int k = c.choose();
      int n_acc = 1;
      while (n_acc <= k && accept(rng)) ++n_acc;
      const double step = (1.0 + per_draft * k) * noise(rng);
      c.record(k, n_acc, step);
      tokens += n_acc;
      cost += step;
    }
    EXPECT_GT(tokens / cost, 0.985) << "per_draft " << per_draft << ": plain decoding gives 1.0";
    if (per_draft >= 1.0) {  // k = 1 loses or ties: plain nearly always
      EXPECT_GT(c.steps_per_k()[0], steps * 95 / 100) << "per_draft " << per_draft;
    }
  }
}

TEST(SpeculationControl, FixedModeAlwaysUsesK) {
  SpeculationControl c(4, ControlMode::kFixed);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(c.choose(), 4);
    c.record(4, 1, 1.0);
  }
  EXPECT_THROW(parse_control_mode("sometimes"), Error);
}

TEST(SpeculationControl, AdaptiveGreedyOutputEqualsPlain) {
  for (const std::string& name : testing::golden_model_names()) {
    auto model = testing::load_fixture(name);
    const auto prompts = testing::goldens(name)["prompts"];
    const std::vector<int32_t> prompt = prompts[std::min<size_t>(2, prompts.size() - 1)]["ids"];
    Generator plain(*model, nullptr, GeneratorOptions{.max_context = 512});
    const auto expected =
        plain.generate(GenerateRequest{.prompt = prompt, .max_tokens = 80}).tokens;
    Generator adaptive(
        *model, std::make_unique<MtpDrafter>(*model),
        GeneratorOptions{
            .num_speculative_tokens = 4, .control = ControlMode::kAdaptive, .max_context = 512});
    const auto r = adaptive.generate(GenerateRequest{.prompt = prompt, .max_tokens = 80});
    EXPECT_EQ(r.tokens, expected) << name;
    int used = 0;
    for (int64_t n : r.stats.steps_per_k) used += n > 0;
    EXPECT_GE(used, 2) << name << ": control should have tried several k";
  }
}

}  // namespace
}  // namespace tandem
