// Invariant 1 on the CPU reference, one sequence: greedy output with speculation is bit-identical
// to plain decoding for every fixture, every k in 1..8 and every acceptance pattern (MTP and the
// oracle drafter), and the committed state a sequence's next step reads after each commit (the
// GDN state after folding the accepted rows, the conv window at offset n_acc, the KV of the
// committed positions) equals, bit for bit, the state of a plain run at the same position.
// Batches, arrivals, preemption and sampling: batch_exactness_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "engine/committed_state.h"
#include "engine/generator.h"
#include "spec/mtp_drafter.h"
#include "spec/oracle_drafter.h"
#include "test_support.h"

namespace tandem {
namespace {

constexpr int kTokens = 64;

std::vector<int32_t> prompt_of(const std::string& name) {
  const auto prompts = testing::goldens(name)["prompts"];
  return prompts[std::min<size_t>(2, prompts.size() - 1)]["ids"].get<std::vector<int32_t>>();
}

// The committed state as the next step will read it, flattened.
std::vector<float> flat_state(Generator& gen) {
  BatchEngine& e = gen.engine();
  std::vector<float> out;
  for (const NamedState& s : committed_state(e.model(), e.pool(), e.cache(gen.current())))
    out.insert(out.end(), s.values.begin(), s.values.end());
  return out;
}

struct PlainRun {
  std::vector<int32_t> tokens;
  std::map<int64_t, std::vector<float>> state_at;  // n_past -> committed state
};

PlainRun plain_run(Qwen35Model& model, const std::vector<int32_t>& prompt, int n_tokens) {
  PlainRun r;
  Generator gen(model, nullptr, GeneratorOptions{.max_context = 512});
  gen.after_commit = [&](int64_t, int64_t n_past) { r.state_at[n_past] = flat_state(gen); };
  r.tokens = gen.generate(GenerateRequest{.prompt = prompt, .max_tokens = n_tokens}).tokens;
  return r;
}

// Runs with a drafter and checks tokens and every committed state against the plain run.
void expect_exact(Qwen35Model& model, const PlainRun& plain, const std::vector<int32_t>& prompt,
                  std::unique_ptr<Drafter> drafter, int k, const std::string& what) {
  Generator gen(model, std::move(drafter),
                GeneratorOptions{.num_speculative_tokens = k, .max_context = 512});
  int state_checks = 0, state_mismatches = 0;
  gen.after_commit = [&](int64_t, int64_t n_past) {
    auto it = plain.state_at.find(n_past);
    if (it == plain.state_at.end()) return;
    const std::vector<float> s = flat_state(gen);
    ++state_checks;
    state_mismatches += s.size() != it->second.size() ||
                        std::memcmp(s.data(), it->second.data(), s.size() * sizeof(float)) != 0;
  };
  const GenerateResult r = gen.generate(GenerateRequest{.prompt = prompt, .max_tokens = kTokens});
  EXPECT_EQ(r.tokens, plain.tokens) << what;
  EXPECT_GT(state_checks, 0) << what;
  EXPECT_EQ(state_mismatches, 0) << what;
}

class Exactness : public ::testing::TestWithParam<std::string> {};

TEST_P(Exactness, MtpEqualsPlainForEveryK) {
  const std::string name = GetParam();
  auto model = testing::load_fixture(name);
  const auto prompt = prompt_of(name);
  const PlainRun plain = plain_run(*model, prompt, kTokens);
  ASSERT_EQ(plain.tokens.size(), static_cast<size_t>(kTokens));
  for (int k = 1; k <= 8; ++k)
    expect_exact(*model, plain, prompt, std::make_unique<MtpDrafter>(*model), k,
                 name + " mtp k=" + std::to_string(k));
}

TEST_P(Exactness, OracleEqualsPlainForEveryPattern) {
  const std::string name = GetParam();
  auto model = testing::load_fixture(name);
  const auto prompt = prompt_of(name);
  const PlainRun plain = plain_run(*model, prompt, kTokens);
  const PlainRun reference = plain_run(*model, prompt, kTokens + 9);  // the oracle looks ahead
  // seq:8,0 is a full accept then a zero accept and back; seq:0,8 the reverse; first:1 partial.
  const std::vector<std::string> patterns{"all",       "none",    "first:1",
                                          "random:11", "seq:8,0", "seq:0,8,2"};
  for (int k = 1; k <= 8; ++k) {
    for (const std::string& pat : patterns) {
      auto oracle = std::make_unique<OracleDrafter>(AcceptancePattern::parse(pat),
                                                    model->config().vocab_size);
      oracle->set_reference(0, reference.tokens);  // the generator's first request
      expect_exact(*model, plain, prompt, std::move(oracle), k,
                   name + " oracle k=" + std::to_string(k) + " pattern=" + pat);
    }
  }
}

TEST(OraclePattern, ProducesTheRequestedAcceptance) {
  auto model = testing::load_fixture("tiny-text");
  const auto prompt = prompt_of("tiny-text");
  const PlainRun reference = plain_run(*model, prompt, 64);
  for (const auto& [pat, expected] :
       std::vector<std::pair<std::string, double>>{{"all", 4.0}, {"none", 1.0}, {"first:1", 2.0}}) {
    auto oracle =
        std::make_unique<OracleDrafter>(AcceptancePattern::parse(pat), model->config().vocab_size);
    oracle->set_reference(0, reference.tokens);
    Generator gen(*model, std::move(oracle),
                  GeneratorOptions{.num_speculative_tokens = 3, .max_context = 512});
    const auto r = gen.generate(GenerateRequest{.prompt = prompt, .max_tokens = 40});
    EXPECT_DOUBLE_EQ(r.stats.mean_acceptance_length(), expected) << pat;
  }
}

// Forwards to a drafter and keeps every draft it proposes.
class RecordingDrafter : public Drafter {
 public:
  explicit RecordingDrafter(std::unique_ptr<Drafter> inner) : inner_(std::move(inner)) {}
  void prepare(const DrafterSetup& setup) override { inner_->prepare(setup); }
  void begin_sequence(SeqId seq) override { inner_->begin_sequence(seq); }
  void end_sequence(SeqId seq) override { inner_->end_sequence(seq); }
  void after_target_step(std::span<const TargetRows> rows) override {
    inner_->after_target_step(rows);
  }
  void catch_up(std::span<const SeqId> seqs, int64_t keep_rows, int64_t max_rows) override {
    inner_->catch_up(seqs, keep_rows, max_rows);
  }
  std::vector<std::vector<int32_t>> propose(std::span<const DraftAsk> asks) override {
    auto d = inner_->propose(asks);
    for (const auto& v : d) drafts->insert(drafts->end(), v.begin(), v.end());
    return d;
  }
  std::shared_ptr<std::vector<int32_t>> drafts = std::make_shared<std::vector<int32_t>>();

 private:
  std::unique_ptr<Drafter> inner_;
};

// --speculative-token-map: drafts restricted to a draft vocabulary (the logits of those rows of
// lm_head) change what is accepted, never the output or the committed state; every draft is in
// the map; a map of the whole vocabulary in order drafts exactly what the plain MTP drafter does.
TEST(DraftVocabulary, OutputsAndStatesEqualPlainAndDraftsStayInTheMap) {
  const std::string name = "tandem-tiny-qwen35";
  auto model = testing::load_fixture(name);
  const auto prompt = prompt_of(name);
  const PlainRun plain = plain_run(*model, prompt, kTokens);
  const int32_t vocab = static_cast<int32_t>(model->config().vocab_size);
  std::vector<int32_t> even, all, never_emitted;
  for (int32_t t = 0; t < vocab; ++t) {
    all.push_back(t);
    if (t % 2 == 0) even.push_back(t);
    if (std::find(plain.tokens.begin(), plain.tokens.end(), t) == plain.tokens.end())
      never_emitted.push_back(t);
  }
  std::reverse(never_emitted.begin(), never_emitted.end());  // any order
  const std::vector<std::pair<std::string, std::vector<int32_t>>> maps{
      {"even ids", even}, {"no emitted token (nothing accepted)", never_emitted}, {"all", all}};
  for (int k : {1, 3}) {
    auto full = std::make_unique<RecordingDrafter>(std::make_unique<MtpDrafter>(*model));
    const auto full_drafts = full->drafts;
    expect_exact(*model, plain, prompt, std::move(full), k, "no map k=" + std::to_string(k));
    for (const auto& [what, ids] : maps) {
      auto rec = std::make_unique<RecordingDrafter>(std::make_unique<MtpDrafter>(*model, ids));
      const auto drafts = rec->drafts;
      const std::string label = what + " k=" + std::to_string(k);
      expect_exact(*model, plain, prompt, std::move(rec), k, label);
      ASSERT_FALSE(drafts->empty()) << label;
      for (int32_t d : *drafts)
        ASSERT_NE(std::find(ids.begin(), ids.end(), d), ids.end()) << label << ": draft " << d;
      if (what == "all") {
        EXPECT_EQ(*drafts, *full_drafts) << label;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Exactness, ::testing::ValuesIn(testing::golden_model_names()),
                         testing::model_param_name);

}  // namespace
}  // namespace tandem
