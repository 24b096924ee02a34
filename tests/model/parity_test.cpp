// Model parity against Hugging Face transformers goldens (tools/goldens/record_goldens.py):
// logits within 1e-3 x max|logit|, identical argmax where the top-2 margin exceeds 1e-3, greedy
// continuation identical for the recorded tokens; and prefill-then-decode equals one prefill.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/npy.h"
#include "engine/generator.h"
#include "test_support.h"

namespace tandem {
namespace {

using testing::fixture_dir;
using testing::fixture_names;

struct Compare {
  double max_abs = 0, max_ref = 0;
  int checked_rows = 0, argmax_mismatch = 0;
};

Compare compare_logits(const Tensor& got, const Tensor& ref) {
  Compare c;
  const int64_t n = ref.dim(0), v = ref.dim(1);
  for (int64_t t = 0; t < n; ++t) {
    const float* g = got.data<float>() + t * v;
    const float* r = ref.data<float>() + t * v;
    int64_t best = 0, second = -1, gbest = 0;
    for (int64_t i = 0; i < v; ++i) {
      c.max_abs = std::max(c.max_abs, static_cast<double>(std::fabs(g[i] - r[i])));
      c.max_ref = std::max(c.max_ref, static_cast<double>(std::fabs(r[i])));
      if (g[i] > g[gbest]) gbest = i;
      if (r[i] > r[best]) {
        second = best;
        best = i;
      } else if (i != best && (second < 0 || r[i] > r[second])) {
        second = i;
      }
    }
    if (second >= 0 && r[best] - r[second] <= 1e-3f) continue;  // near-tie: argmax not defined
    ++c.checked_rows;
    c.argmax_mismatch += gbest != best;
  }
  return c;
}

class ModelParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelParity, LogitsAndGreedyMatchTransformers) {
  const std::string name = GetParam();
  auto model = testing::load_fixture(name);
  const auto g = testing::goldens(name);
  ASSERT_GE(g["prompts"].size(), 2u);
  for (const auto& p : g["prompts"]) {
    const std::vector<int32_t> ids = p["ids"];
    Generator gen(*model, nullptr, GeneratorOptions{.max_context = 512});
    const Tensor got = gen.score(ids);
    const Tensor ref = read_npy(testing::golden_dir(name) + "/" + p["logits"].get<std::string>());
    ASSERT_EQ(got.shape(), ref.shape());
    const Compare c = compare_logits(got, ref);
    std::printf(
        "[parity] %s n=%zu max|diff|=%.3g max|logit|=%.3g rel=%.3g argmax rows=%d mismatches=%d\n",
        name.c_str(), ids.size(), c.max_abs, c.max_ref, c.max_abs / c.max_ref, c.checked_rows,
        c.argmax_mismatch);
    EXPECT_LE(c.max_abs, 1e-3 * c.max_ref) << name << " prompt of " << ids.size();
    EXPECT_EQ(c.argmax_mismatch, 0);
    EXPECT_GT(c.checked_rows, 0);

    const std::vector<int32_t> greedy = p["greedy"];
    ASSERT_GE(greedy.size(), 24u);
    GenerateRequest req{.prompt = ids, .max_tokens = static_cast<int>(greedy.size())};
    EXPECT_EQ(gen.generate(req).tokens, greedy) << name << " prompt of " << ids.size();
  }
}

TEST_P(ModelParity, PrefillThenDecodeEqualsOnePrefill) {
  const std::string name = GetParam();
  auto model = testing::load_fixture(name, 64);  // 64-token chunks: a 100-token prompt spans 2
  const auto g = testing::goldens(name);
  const std::vector<int32_t> ids = g["prompts"].back()["ids"];  // the longest prompt
  const int64_t vocab = model->config().vocab_size,
                split = static_cast<int64_t>(ids.size()) * 7 / 10;
  Generator whole(*model, nullptr, GeneratorOptions{.max_context = 512});
  const Tensor ref = whole.score(ids);
  // Prefill the first `split` tokens, then feed the rest one at a time as decode steps.
  testing::Solo solo(*model);
  Tensor got = Tensor::zeros({static_cast<int64_t>(ids.size()), vocab}, DType::kF32);
  for (int64_t s = 0; s < split; s += 64) {  // prefill chunks at multiples of 64
    const int64_t n = std::min<int64_t>(64, split - s);
    got.slice(0, s, s + n).copy_from(solo.step(std::span<const int32_t>(&ids[s], n), false));
    solo.seq().commit_prefill(n);
  }
  for (int64_t t = split; t < static_cast<int64_t>(ids.size()); ++t) {
    got.slice(0, t, t + 1).copy_from(solo.step(std::span<const int32_t>(&ids[t], 1), true));
    solo.seq().commit_verify(1);
  }
  const Compare c = compare_logits(got, ref);
  std::printf("[prefill+decode] %s max|diff|=%.3g rel=%.3g\n", name.c_str(), c.max_abs,
              c.max_abs / c.max_ref);
  EXPECT_LE(c.max_abs, 1e-3 * c.max_ref);
  EXPECT_EQ(c.argmax_mismatch, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelParity, ::testing::ValuesIn(testing::golden_model_names()),
                         testing::model_param_name);

}  // namespace
}  // namespace tandem
