// The divergence finder says "identical" on correct code, and names a deliberately corrupted SSM
// column (layer, step, state) when a test hook flips one element after a commit.
#include "engine/divergence.h"

#include <gtest/gtest.h>

#include "spec/mtp_drafter.h"
#include "spec/oracle_drafter.h"
#include "test_support.h"

namespace tandem {
namespace {

TEST(Divergence, IdenticalOnCorrectCode) {
  auto model = testing::load_fixture("tiny-text");
  Qwen35Model& m = *model;
  DivergenceOptions opt{.prompt = {3, 14, 15, 92, 65},
                        .max_tokens = 24,
                        .num_speculative_tokens = 3,
                        .max_context = 256};
  const DivergenceReport r = find_divergence(
      m, [&m] { return std::make_unique<MtpDrafter>(m); }, opt);
  EXPECT_TRUE(r.identical) << r.describe();
  EXPECT_EQ(r.describe(), "identical");
}

TEST(Divergence, NamesACorruptedSsmColumn) {
  auto model = testing::load_fixture("tiny-text");
  Qwen35Model& m = *model;
  const int64_t gdn_layer = 1;  // tiny-text layers: GDN, GDN, GDN, attention
  ASSERT_EQ(m.config().layer_types[gdn_layer], LayerType::kLinearAttention);
  DivergenceOptions opt{.prompt = {3, 14, 15, 92, 65},
                        .max_tokens = 24,
                        .num_speculative_tokens = 3,
                        .max_context = 256};
  opt.after_commit_hook = [&](SequenceState& st, int64_t step) {
    if (step != 4) return;
    Tensor col = st.gdn[gdn_layer].ssm.select(0, st.n_acc_host() - 1);
    col.data<float>()[7] += 1e-3f;  // the column the next step reads
  };
  // The oracle accepts every draft, so the corrupted column is the last one (n_acc - 1 = 3).
  Generator plain(m, nullptr, GeneratorOptions{.max_context = 256});
  const auto reference =
      plain.generate(GenerateRequest{.prompt = opt.prompt, .max_tokens = 40}).tokens;
  const DivergenceReport r = find_divergence(
      m,
      [&] {
        return std::make_unique<OracleDrafter>(reference, AcceptancePattern::parse("all"),
                                               m.config().vocab_size);
      },
      opt);
  ASSERT_FALSE(r.identical);
  EXPECT_EQ(r.state, "ssm column 3");
  EXPECT_EQ(r.step, 4);
  EXPECT_EQ(r.layer, gdn_layer);
  EXPECT_NE(r.state.find("ssm column"), std::string::npos) << r.describe();
  EXPECT_EQ(r.index, 7);
  EXPECT_NE(r.plain, r.spec);
  std::printf("[diverge] %s\n", r.describe().c_str());
}

}  // namespace
}  // namespace tandem
