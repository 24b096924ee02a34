// End to end on the GPU: greedy CUDA output equals CUDA output with MTP for k = 1..8 and with the
// oracle drafter's patterns, bit for bit (invariant 1); it equals the CPU reference's greedy
// output up to the first near-tie of the CPU logits (reported); steps replayed from CUDA graphs
// give the same drafts, targets and n_acc as eager launches, step by step; and 256 requests
// arriving at random steps, batched with graphs on (plain, MTP k = 1..3, adaptive, sampled), each
// equal their solo runs. Skipped without a GPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "batch_support.h"
#include "engine/generator.h"
#include "engine_cuda_support.h"
#include "spec/mtp_drafter.h"
#include "spec/oracle_drafter.h"
#include "test_support.h"

namespace tandem {
namespace {

std::unique_ptr<Qwen35Model> load_on(const std::string& name, Device d) {
  return testing::load_dir_on(testing::fixture_dir(name), d);
}

using testing::generate;

// The fixture model on CUDA and its third golden prompt; skipped without a GPU or when the model's
// shapes are not built for CUDA (named at load time).
class EngineCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    try {
      gpu_ = load_on(GetParam(), Device::kCuda);
    } catch (const Error& e) {
      GTEST_SKIP() << e.what();
    }
    const auto prompts = testing::goldens(GetParam())["prompts"];
    prompt_ = prompts[std::min<size_t>(2, prompts.size() - 1)]["ids"].get<std::vector<int32_t>>();
  }
  std::unique_ptr<Qwen35Model> gpu_;
  std::vector<int32_t> prompt_;
};

TEST_P(EngineCuda, SpeculationIsExactAndAgreesWithCpu) {
  const std::string name = GetParam();
  Qwen35Model* gpu = gpu_.get();
  const std::vector<int32_t>& prompt = prompt_;
  constexpr int kTokens = 64;
  const auto plain = generate(*gpu, nullptr, 0, prompt, kTokens);
  ASSERT_EQ(plain.size(), static_cast<size_t>(kTokens));
  for (int k = 1; k <= 8; ++k)
    EXPECT_EQ(generate(*gpu, std::make_unique<MtpDrafter>(*gpu), k, prompt, kTokens), plain)
        << name << " mtp k=" << k;
  const auto reference = generate(*gpu, nullptr, 0, prompt, kTokens + 9);
  for (int k : {1, 3, 8}) {
    for (const char* pat : {"all", "none", "random:5", "seq:8,0"}) {
      auto oracle =
          std::make_unique<OracleDrafter>(AcceptancePattern::parse(pat), gpu->config().vocab_size);
      oracle->set_reference(0, reference);  // the generator's first request
      EXPECT_EQ(generate(*gpu, std::move(oracle), k, prompt, kTokens), plain)
          << name << " oracle k=" << k << " " << pat;
    }
  }
  // CPU agreement up to the first near-tie (top-2 margin below 0.05) along the CPU's greedy path.
  auto cpu = load_on(name, Device::kCpu);
  const auto cpu_tokens = generate(*cpu, nullptr, 0, prompt, kTokens);
  const testing::CpuAgreement a = testing::cpu_agreement(*cpu, prompt, cpu_tokens, plain);
  std::printf(
      "[gpu vs cpu] %s: agree on %zu of %d tokens; first CPU near-tie (margin < 0.05) at token "
      "%zu\n",
      name.c_str(), a.agree, kTokens, a.near_tie);
  // bf16 activations through random-weight layers move logits by a few % of their range, more than
  // many top-2 margins of a random model, so the agreement is asserted on the trained model only
  // and reported for the random fixtures (GPU vs CPU logits: see docs/cuda.md).
  if (name == testing::kTrainedModel) {
    EXPECT_GE(a.agree, a.near_tie) << name;
  }
}

// Verify steps replayed from CUDA graphs (one per batch bucket and depth, captured at start-up)
// give the same drafts, target tokens and n_acc as eager launches, step by step.
TEST_P(EngineCuda, GraphStepsEqualEagerSteps) {
  const std::string name = GetParam();
  Qwen35Model* gpu = gpu_.get();
  for (int k : {1, 3, 8}) {
    std::string trace[2];  // [eager, graphs]
    for (bool graphs : {false, true}) {
      std::ostringstream out;
      Generator gen(*gpu, std::make_unique<MtpDrafter>(*gpu),
                    GeneratorOptions{.num_speculative_tokens = k,
                                     .max_context = 512,
                                     .trace = &out,
                                     .cuda_graphs = graphs});
      EXPECT_EQ(gen.uses_cuda_graphs(), graphs) << name << " k=" << k;
      gen.generate(GenerateRequest{.prompt = prompt_, .max_tokens = 64});
      if (graphs) {
        EXPECT_GT(gen.engine().counters().graph_steps, 0) << name;
      }
      std::istringstream lines(out.str());
      for (std::string line; std::getline(lines, line);) {
        nlohmann::json step = nlohmann::json::parse(line);
        step.erase("seconds");
        trace[graphs] += step.dump() + "\n";
      }
    }
    EXPECT_FALSE(trace[1].empty());
    EXPECT_EQ(trace[0], trace[1]) << name << " k=" << k;
  }
}

// 256 requests of the trained model on the GPU: each output equals its solo run without
// speculation, bit for bit, with graphs on, under plain decoding, MTP k = 1..3, adaptive control
// and seeded sampling.
TEST(EngineCudaBatch, TwoHundredFiftySixRequestsEqualTheirSoloRuns) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto gpu = load_on(testing::kTrainedModel, Device::kCuda);
  const std::vector<testing::Arrival> arrivals =
      testing::random_arrivals(*gpu, 256, 24, /*sampled=*/true);
  const auto reference = testing::solo(*gpu, arrivals);
  for (const testing::SpecConfig& c : testing::spec_configs()) {
    std::unique_ptr<Drafter> d;
    if (c.k > 0) d = std::make_unique<MtpDrafter>(*gpu);
    BatchEngine engine(*gpu, std::move(d), testing::batch_options(c.k, c.control, 64, 512));
    ASSERT_TRUE(engine.uses_cuda_graphs());
    const testing::BatchRun r = testing::run_batch(engine, arrivals);
    const int bad = testing::mismatches(r.tokens, reference, c.name);
    std::printf(
        "[cuda batch exactness] %s: 256 requests (128 sampled), %lld steps (%lld from graphs), "
        "up to %lld running, %lld drafts, %lld accepted, %d differ\n",
        c.name, static_cast<long long>(r.counters.steps),
        static_cast<long long>(r.counters.graph_steps), static_cast<long long>(r.max_running),
        static_cast<long long>(r.counters.draft_tokens),
        static_cast<long long>(r.counters.accepted_tokens), bad);
    EXPECT_EQ(bad, 0) << c.name;
    EXPECT_GT(r.counters.graph_steps, 0) << c.name;
    EXPECT_GE(r.max_running, 16) << c.name;  // the token budget bounds admissions with drafts
  }
}

// Prefix caching on the GPU (graphs on): requests sharing a prompt prefix and a next turn start
// from kept prefixes, and each output equals its solo run, plain and with MTP k = 3.
TEST(EngineCudaBatch, PrefixCacheHitsEqualTheirSoloRuns) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto gpu = load_on(testing::kTrainedModel, Device::kCuda);
  const std::vector<testing::Arrival> arrivals = testing::shared_prefix_arrivals(*gpu);
  const auto reference = testing::solo(*gpu, arrivals);
  for (const testing::SpecConfig& c : {testing::spec_configs()[0], testing::spec_configs()[3]}) {
    std::unique_ptr<Drafter> d;
    if (c.k > 0) d = std::make_unique<MtpDrafter>(*gpu);
    BatchEngineOptions opt = testing::batch_options(c.k, c.control, 16, 512);
    opt.prefix_cache_bytes = int64_t{1} << 30;
    BatchEngine engine(*gpu, std::move(d), opt);
    const testing::BatchRun r = testing::run_batch(engine, arrivals);
    const int bad = testing::mismatches(r.tokens, reference, c.name);
    std::printf(
        "[cuda prefix cache] %s: %zu requests, %lld hits, %lld prompt tokens restored, "
        "%d differ\n",
        c.name, arrivals.size(), static_cast<long long>(r.counters.prefix_hits),
        static_cast<long long>(r.counters.cached_prompt_tokens), bad);
    EXPECT_EQ(bad, 0) << c.name;
    EXPECT_GE(r.counters.prefix_hits, 15) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EngineCuda, ::testing::ValuesIn(testing::golden_model_names()),
                         testing::model_param_name);

}  // namespace
}  // namespace tandem
