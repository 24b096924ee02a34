// Pool sizing for the Qwen3.5-27B shape (configs/qwen3.5-27b.json), computed on the CPU: per
// sequence the GDN state is one fp32 state per layer plus k+1 small rows (invariant 3), so 256
// sequences with k = 3 at 1K context fit on one H200 next to the bf16 weights, where k+1 state
// columns per sequence would not; and the start-up description says how many 32K sequences fit.
#include <gtest/gtest.h>

#include "cache/cache_config.h"
#include "test_support.h"

namespace tandem {
namespace {

constexpr double kGiB = 1073741824.0;

TEST(CacheSizing, Qwen35_27bFitsTwoHundredFiftySixSequencesAtOneK) {
  const ModelConfig m = ModelConfig::from_file(testing::source_path("configs/qwen3.5-27b.json"));
  CacheConfig c{
      .block_size = 64, .num_slots = 256, .step_rows = 4, .max_model_len = 2048, .with_mtp = true};
  const int64_t slot = gdn_slot_bytes(m, c, DType::kBF16);
  const int64_t block = kv_block_bytes(m, c, DType::kBF16);
  // One fp32 state per GDN layer: 48 layers x 48 heads x 128 x 128 x 4 B = 151 MB, plus the conv
  // history and the replay rows of one step (a few MB), not 4 x 151 MB.
  const int64_t state = int64_t{48} * 48 * 128 * 128 * 4;
  EXPECT_GT(slot, state);
  EXPECT_LT(slot, state + (int64_t{16} << 20));
  // KV: 16 attention layers + the MTP layer, 4 kv heads x 256 dims, K and V in bf16.
  EXPECT_EQ(block, int64_t{2} * 17 * 64 * 4 * 256 * 2);
  // An H200 (139 GiB) with the 27B bf16 weights (~51 GB) and ~4 GiB of activations, logits and
  // workspace: the rest at 0.9 utilisation holds 256 slots and every sequence at 2K positions.
  const int64_t free_after_weights = static_cast<int64_t>((139.0 - 51.3e9 / kGiB - 4.0) * kGiB);
  const CacheConfig fit =
      fit_cache_to_budget(m, c, DType::kBF16, static_cast<int64_t>(0.9 * free_after_weights));
  EXPECT_GE(fit.num_blocks, 256 * fit.max_blocks_per_seq());
  const std::string text = describe_cache(m, fit, DType::kBF16);
  std::printf("[27B sizing] slot %.1f MiB, block %.2f MiB\n%s\n", slot / 1048576.0,
              block / 1048576.0, text.c_str());
  EXPECT_NE(text.find("256 of 1024 tokens"), std::string::npos) << text;
  EXPECT_NE(text.find("of 32768 tokens"), std::string::npos) << text;
  // With k + 1 = 4 state columns per sequence (the old layout) the states alone would need more
  // than the whole GPU.
  EXPECT_GT(256.0 * 4 * state / kGiB, 139.0);
}

TEST(CacheSizing, ABudgetTooSmallForOneSequenceIsAClearError) {
  const ModelConfig m = ModelConfig::from_file(testing::source_path("configs/qwen3.5-27b.json"));
  CacheConfig c{.block_size = 64, .num_slots = 256, .step_rows = 4, .max_model_len = 32768};
  try {
    fit_cache_to_budget(m, c, DType::kBF16, int64_t{20} << 30);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lower --max-num-seqs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
