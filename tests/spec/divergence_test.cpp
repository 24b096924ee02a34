// The divergence finder says "identical" on correct code, and names a deliberately corrupted GDN
// state (layer, step, state) when a test hook flips one element of a committed state after a
// commit.
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
  opt.after_commit_hook = [&](Generator& gen, int64_t step) {
    if (step != 4) return;
    BatchEngine& e = gen.engine();
    const Tensor ssm =
        e.pool().views().layers[gdn_layer].ssm.select(0, e.cache(gen.current()).slot);
    // The committed state the next step folds 4 rows into, each decaying it (by ~0.008 per row in
    // this head): a corruption of the element's own size survives the fold at any rounding.
    ssm.data<float>()[7] += 1.f;
  };
  // The oracle accepts every draft, so the next step folds n_acc = 4 rows.
  Generator plain(m, nullptr, GeneratorOptions{.max_context = 256});
  const auto reference =
      plain.generate(GenerateRequest{.prompt = opt.prompt, .max_tokens = 40}).tokens;
  const DivergenceReport r = find_divergence(
      m,
      [&] {
        auto o =
            std::make_unique<OracleDrafter>(AcceptancePattern::parse("all"), m.config().vocab_size);
        o->set_reference(0, reference);
        return o;
      },
      opt);
  ASSERT_FALSE(r.identical);
  EXPECT_EQ(r.state, "ssm (after folding 4 rows)");
  EXPECT_EQ(r.step, 4);
  EXPECT_EQ(r.layer, gdn_layer);
  EXPECT_NE(r.state.find("ssm"), std::string::npos) << r.describe();
  EXPECT_EQ(r.index, 7);
  EXPECT_NE(r.plain, r.spec);
  std::printf("[diverge] %s\n", r.describe().c_str());
}

}  // namespace
}  // namespace tandem
