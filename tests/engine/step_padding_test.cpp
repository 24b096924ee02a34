// A graph bucket's padding changes no real row (issue 14 item 4): the same step of two decoding
// sequences, laid out alone and padded to a bucket of four sequences x (k + 1) rows (two padding
// sequences on the scratch slot and block, orphan rows at the end), gives bit-identical logits
// for every real row and leaves every real sequence's committed state bit-identical.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/committed_state.h"
#include "test_support.h"

namespace tandem {
namespace {

struct StepResult {
  std::vector<float> logits;              // the real rows'
  std::vector<std::vector<float>> state;  // per real sequence, after the step's fold
};

StepResult run_step(Qwen35Model& m, bool padded) {
  CacheConfig cc{.block_size = 64,
                 .num_slots = 4,
                 .step_rows = 4,
                 .max_model_len = 256,
                 .with_mtp = m.has_mtp()};
  cc.num_blocks = 4 * cc.table_width();
  StatePool pool(m.config(), cc, m.context(), m.act_dtype(), 16);
  StepBuffers buffers(m.max_step_rows(), 4, cc.table_width(), 64, pool.scratch_block(),
                      pool.scratch_slot(), m.context().device);
  std::vector<SequenceCache> seqs(2);
  const std::vector<std::vector<int32_t>> prompts{{5, 9, 2, 7, 1}, {3, 3, 8}};
  const std::vector<std::vector<int32_t>> steps{{11, 12, 13}, {21, 22}};  // last + drafts
  for (int s = 0; s < 2; ++s) {                                           // prefill each alone
    EXPECT_TRUE(pool.acquire(seqs[s]) && pool.reserve(seqs[s], 64));
    const PlannedSeq p{.cache = &seqs[s],
                       .tokens = prompts[s],
                       .rows = static_cast<int64_t>(prompts[s].size()),
                       .start = 0,
                       .decode = false};
    m.forward(buffers.plan(std::span<const PlannedSeq>(&p, 1)).batch, pool.views(), Tensor());
    seqs[s].commit_prefill(static_cast<int64_t>(prompts[s].size()));
  }
  std::vector<PlannedSeq> planned;
  for (int s = 0; s < 2; ++s) {
    planned.push_back({.cache = &seqs[s],
                       .tokens = steps[s],
                       .rows = static_cast<int64_t>(steps[s].size()),
                       .start = seqs[s].n_past,
                       .decode = true,
                       .logits = LogitRows::kAll});
  }
  if (padded) {
    for (int s = 0; s < 2; ++s) planned.push_back({.decode = true, .logits = LogitRows::kAll});
  }
  const StepPlan plan =
      padded ? buffers.plan(planned, {.rows = 16, .max_decode_rows = 4}) : buffers.plan(planned);
  Tensor logits = Tensor::zeros({plan.batch.n_logit_rows, m.config().vocab_size}, DType::kF32);
  m.forward(plan.batch, pool.views(), logits);
  StepResult r;
  const int64_t real = plan.logit_start[2];  // the first two sequences' rows come first
  r.logits.assign(logits.data<float>(), logits.data<float>() + real * m.config().vocab_size);
  for (int s = 0; s < 2; ++s) {
    seqs[s].commit_verify(2);  // both accept one draft: the next step folds two rows
    std::vector<float> flat;
    for (const NamedState& n : committed_state(m, pool, seqs[s]))
      flat.insert(flat.end(), n.values.begin(), n.values.end());
    r.state.push_back(std::move(flat));
  }
  return r;
}

TEST(StepPadding, PaddedBucketChangesNoRealRow) {
  auto model = testing::load_fixture(testing::kTrainedModel);
  const StepResult alone = run_step(*model, false), padded = run_step(*model, true);
  ASSERT_EQ(alone.logits.size(), padded.logits.size());
  EXPECT_EQ(std::memcmp(alone.logits.data(), padded.logits.data(), alone.logits.size() * 4), 0);
  for (int s = 0; s < 2; ++s) {
    ASSERT_EQ(alone.state[s].size(), padded.state[s].size());
    EXPECT_EQ(std::memcmp(alone.state[s].data(), padded.state[s].data(), alone.state[s].size() * 4),
              0)
        << "sequence " << s;
  }
}

}  // namespace
}  // namespace tandem
