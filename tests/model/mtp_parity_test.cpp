// MTP parity against the teacher-forced MTP logits recorded with transformers' own Qwen3.5
// decoder layer (tools/qwen35_mtp.py): every position within the model-parity tolerance, and in a
// speculative run every first draft equals the reference argmax at its position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/npy.h"
#include "engine/generator.h"
#include "spec/mtp_drafter.h"
#include "test_support.h"

namespace tandem {
namespace {

using testing::fixture_dir;

// Row margin between the best and second-best logit.
float top2_margin(const float* r, int64_t v, int64_t* best_out) {
  int64_t best = 0;
  for (int64_t i = 1; i < v; ++i)
    if (r[i] > r[best]) best = i;
  float second = -INFINITY;
  for (int64_t i = 0; i < v; ++i)
    if (i != best) second = std::max(second, r[i]);
  *best_out = best;
  return r[best] - second;
}

class MtpParity : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpParity, TeacherForcedLogitsMatchReference) {
  const std::string name = GetParam();
  auto model = testing::load_fixture(name);
  ASSERT_TRUE(model->has_mtp());
  const auto g = testing::goldens(name);
  const int64_t vocab = model->config().vocab_size;
  for (const auto& p : g["prompts"]) {
    const std::vector<int32_t> seq = p["mtp_sequence"];
    const int64_t n = static_cast<int64_t>(seq.size());
    const Tensor ref =
        read_npy(testing::golden_dir(name) + "/" + p["mtp_logits"].get<std::string>());
    ASSERT_EQ(ref.dim(0), n - 1);
    testing::Solo solo(*model);
    solo.step(seq, false);
    Tensor hidden_out = Tensor::zeros({n - 1, model->config().hidden_size}, DType::kF32);
    const Tensor got = solo.mtp(std::span<const int32_t>(seq.data() + 1, n - 1), 0,
                                model->hidden(n - 1), hidden_out);
    double max_abs = 0, max_ref = 0;
    int mismatches = 0, checked = 0;
    for (int64_t t = 0; t < n - 1; ++t) {
      const float* a = got.data<float>() + t * vocab;
      const float* b = ref.data<float>() + t * vocab;
      for (int64_t i = 0; i < vocab; ++i) {
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(a[i] - b[i])));
        max_ref = std::max(max_ref, static_cast<double>(std::fabs(b[i])));
      }
      int64_t rb, gb;
      if (top2_margin(b, vocab, &rb) <= 1e-3f) continue;
      top2_margin(a, vocab, &gb);
      ++checked;
      mismatches += rb != gb;
    }
    std::printf("[mtp parity] %s T=%lld max|diff|=%.3g rel=%.3g argmax rows=%d mismatches=%d\n",
                name.c_str(), static_cast<long long>(n), max_abs, max_abs / max_ref, checked,
                mismatches);
    EXPECT_LE(max_abs, 1e-3 * max_ref);
    EXPECT_EQ(mismatches, 0);
  }
}

TEST_P(MtpParity, FirstDraftOfEveryStepIsReferenceArgmax) {
  const std::string name = GetParam();
  auto model = testing::load_fixture(name);
  const auto g = testing::goldens(name);
  const int64_t vocab = model->config().vocab_size;
  for (int k : {1, 3}) {
    for (const auto& p : g["prompts"]) {
      const std::vector<int32_t> ids = p["ids"];
      const std::vector<int32_t> greedy = p["greedy"];
      const Tensor ref =
          read_npy(testing::golden_dir(name) + "/" + p["mtp_logits"].get<std::string>());
      std::ostringstream trace;
      Generator gen(
          *model, std::make_unique<MtpDrafter>(*model),
          GeneratorOptions{.num_speculative_tokens = k, .max_context = 512, .trace = &trace});
      GenerateRequest req{.prompt = ids, .max_tokens = static_cast<int>(greedy.size())};
      ASSERT_EQ(gen.generate(req).tokens, greedy);
      std::istringstream lines(trace.str());
      int checked = 0;
      for (std::string line; std::getline(lines, line);) {
        const auto step = nlohmann::json::parse(line);
        const int64_t pos = step["position"];  // drafts follow (h_pos, x_{pos+1})
        if (pos >= ref.dim(0)) continue;
        int64_t best;
        if (top2_margin(ref.data<float>() + pos * vocab, vocab, &best) <= 1e-3f) continue;
        EXPECT_EQ(step["drafts"][0].get<int64_t>(), best)
            << name << " k=" << k << " position " << pos;
        ++checked;
      }
      EXPECT_GT(checked, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MtpParity, ::testing::ValuesIn(testing::golden_model_names()),
                         testing::model_param_name);

}  // namespace
}  // namespace tandem
