// The scheduler's rules on a real state pool, without running a model: prefill chunks end at
// multiples of the granule from the sequence start (or at the prompt's end), decoding sequences
// come first and the token budget holds, admission waits for slots and blocks, and a decoding
// sequence that cannot grow preempts the most recently admitted one, which comes back first;
// prefill_pending agrees with admission.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace tandem {
namespace {

struct Rig {
  ModelConfig cfg = ModelConfig::from_dir(testing::fixture_dir("tiny-text"));
  StatePool pool;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;

  Rig(int64_t slots, int64_t blocks, int64_t budget)
      : pool(cfg,
             CacheConfig{.block_size = 64,
                         .num_blocks = blocks,
                         .num_slots = slots,
                         .step_rows = 4,
                         .max_model_len = 1024},
             ExecContext{}, DType::kF32, 4 * slots),
        sched(SchedulerConfig{.max_num_seqs = slots,
                              .max_num_batched_tokens = budget,
                              .max_model_len = 1024,
                              .granule = 64},
              pool) {}

  Sequence* add(int64_t prompt_len) {
    auto s = std::make_unique<Sequence>();
    s->id = static_cast<RequestId>(seqs.size());
    s->order = s->id;
    s->req.prompt.assign(prompt_len, 1);
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }
  // What the engine does after a step: prefill chunks commit, decoding sequences accept `acc`.
  void commit(const ScheduledStep& st, int32_t acc) {
    for (Sequence* s : st.decode) s->cache.commit_verify(acc);
    for (const PrefillChunk& c : st.prefill) {
      c.seq->cache.commit_prefill(c.rows);
      c.seq->prefilled += c.rows;
      if (c.last()) c.seq->phase = Phase::kDecode;
    }
  }
};

TEST(Scheduler, ChunksEndAtGranulesFromTheSequenceStart) {
  Rig rig(4, 64, 200);
  EXPECT_EQ(rig.sched.chunk_rows(0, 300, 200), 192);
  EXPECT_EQ(rig.sched.chunk_rows(192, 300, 200), 108);  // the rest fits: the prompt's end
  EXPECT_EQ(rig.sched.chunk_rows(64, 300, 100), 64);    // ends at 128, not at 164
  EXPECT_EQ(rig.sched.chunk_rows(0, 300, 50), 0);       // less than a granule: wait
  Sequence* a = rig.add(300);
  int64_t at = 0;
  for (int step = 0; a->phase != Phase::kDecode; ++step) {
    const ScheduledStep st = rig.sched.schedule(1);
    ASSERT_EQ(st.prefill.size(), 1u);
    EXPECT_EQ(st.prefill[0].start, at);
    const int64_t end = at + st.prefill[0].rows;
    EXPECT_TRUE(end % 64 == 0 || end == 300) << "chunk ends at " << end;
    at = end;
    rig.commit(st, 1);
  }
  EXPECT_EQ(at, 300);
}

TEST(Scheduler, DecodesFirstWithinTheTokenBudget) {
  Rig rig(4, 64, 128);
  Sequence* a = rig.add(64);
  rig.commit(rig.sched.schedule(4), 1);  // a's prompt in one chunk
  ASSERT_EQ(a->phase, Phase::kDecode);
  Sequence* b = rig.add(500);
  const ScheduledStep st = rig.sched.schedule(4);  // a decodes 4 rows: 124 rows are left
  ASSERT_EQ(st.decode.size(), 1u);
  EXPECT_EQ(st.decode[0], a);
  ASSERT_EQ(st.prefill.size(), 1u);
  EXPECT_EQ(st.prefill[0].seq, b);
  EXPECT_EQ(st.prefill[0].rows, 64);  // 124 rounded down to the granule
  // a's blocks cover its step's rows.
  EXPECT_GE(static_cast<int64_t>(a->cache.blocks.size()) * 64, a->cache.n_past + 4);
}

TEST(Scheduler, AdmissionWaitsForSlots) {
  Rig rig(2, 64, 512);
  for (int i = 0; i < 3; ++i) rig.add(10);
  const ScheduledStep st = rig.sched.schedule(1);
  EXPECT_EQ(st.prefill.size(), 2u);
  EXPECT_EQ(rig.sched.running(), 2);
  EXPECT_EQ(rig.sched.waiting(), 1);
  rig.commit(st, 1);
  rig.sched.remove(rig.seqs[0].get());  // finished: its slot frees
  const ScheduledStep next = rig.sched.schedule(1);
  ASSERT_EQ(next.prefill.size(), 1u);
  EXPECT_EQ(next.prefill[0].seq, rig.seqs[2].get());
}

// prefill_pending (adaptive drafting waits for pure decode steps) predicts admission with the
// schedule's own test: a request waiting for blocks, with slots free, does not count.
TEST(Scheduler, PrefillPendingOnlyWhenAdmissible) {
  Rig rig(3, 2, 512);
  rig.add(100);  // both blocks
  const ScheduledStep st = rig.sched.schedule(1);
  ASSERT_EQ(st.prefill.size(), 1u);
  rig.commit(st, 1);
  EXPECT_FALSE(rig.sched.prefill_pending());  // decoding alone
  rig.add(10);
  EXPECT_FALSE(rig.sched.prefill_pending());  // no block free: the next step is pure decode
  const ScheduledStep next = rig.sched.schedule(1);
  EXPECT_TRUE(next.prefill.empty());
  EXPECT_EQ(next.decode.size(), 1u);
  rig.commit(next, 1);
  rig.sched.remove(rig.seqs[0].get());  // its blocks free
  EXPECT_TRUE(rig.sched.prefill_pending());
  EXPECT_EQ(rig.sched.schedule(1).prefill.size(), 1u);
}

TEST(Scheduler, PreemptsTheNewestAndResumesItFirst) {
  // Two sequences of 64-token prompts, 5 blocks: they outgrow the pool while decoding.
  Rig rig(2, 5, 512);
  Sequence* a = rig.add(64);
  Sequence* b = rig.add(64);
  rig.commit(rig.sched.schedule(1), 1);
  ASSERT_EQ(a->phase, Phase::kDecode);
  ASSERT_EQ(b->phase, Phase::kDecode);
  bool preempted = false;
  for (int step = 0; step < 200 && !preempted; ++step) {
    const ScheduledStep st = rig.sched.schedule(4);
    for (Sequence* v : st.preempted) {
      EXPECT_EQ(v, b) << "the most recently admitted sequence goes first";
      EXPECT_EQ(v->phase, Phase::kSwapped);
      preempted = true;
    }
    rig.commit(st, 4);
  }
  ASSERT_TRUE(preempted);
  EXPECT_EQ(rig.pool.used_slots(), 1);
  rig.sched.remove(a);  // a finishes: b swaps back in before anything new is admitted
  rig.add(10);
  const ScheduledStep st = rig.sched.schedule(1);
  EXPECT_EQ(b->phase, Phase::kDecode);
  ASSERT_EQ(st.decode.size(), 1u);
  EXPECT_EQ(st.decode[0], b);
}

}  // namespace
}  // namespace tandem
