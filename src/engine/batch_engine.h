// The batched engine (issue 14): many requests share every step. Each step is plan-then-run
// (DESIGN.md invariant 5): the scheduler picks the decoding sequences and prefill chunks, the
// drafter proposes 0..k drafts per decoding sequence (one batched MTP pass), the host lays the
// step out in fixed buffers, and the target runs it once (a CUDA graph per batch bucket and depth
// when the step is pure decode); then each sequence's acceptance, commit (n_acc, invariant 3) and
// statistics, and the drafter's first-pass queue. A plain decode step is a verify with zero drafts.
// Every sequence's rows are computed as if it ran alone (invariant 2), so its output never depends
// on what it shares a step with, on speculation or on preemption (invariant 1; tested).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <vector>

#include "cache/state_pool.h"
#include "cache/step_buffers.h"
#include "core/cuda_graph.h"
#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "model/arch/qwen35.h"
#include "spec/drafter.h"
#include "spec/speculation_control.h"

namespace tandem {

struct BatchEngineOptions {
  int num_speculative_tokens = 0;             // k: the most drafts per sequence per step
  ControlMode control = ControlMode::kFixed;  // kAdaptive: 0..k per step from measured costs
  bool cuda_graphs = true;                    // CUDA: replay pure decode steps from graphs
  int64_t max_num_seqs = 8;                   // sequences resident at once (GDN slots)
  int64_t max_num_batched_tokens = 0;         // rows per step; 0: the model's max_step_rows
  int64_t max_model_len = 4096;               // positions one sequence may reach
  int64_t kv_blocks = 0;  // KV blocks; 0: from gpu_memory_utilization (cuda) or enough for every
                          // slot at max_model_len (cpu)
  double gpu_memory_utilization = 0.9;  // cuda: fraction of the free memory the cache may take
  int64_t block_size = 64;
  std::ostream* trace = nullptr;  // JSONL, one line per sequence per decode step
  // false (servers): a request is forgotten once its final output is returned, which carries
  // its statistics; stats(), generated() and cache() then no longer know it.
  bool keep_finished = true;
  // A drafting step after k = 0 steps runs the drafter's deferred first pass over at most
  // catch_up_rows rows in all, the most recent catch_up_rows / n of each of its n sequences but at
  // least catch_up_min_rows (older deferred rows are dropped: Drafter::catch_up). A probe of
  // drafting at a large batch, where it seldom pays, must not cost a pass over every prompt and
  // generated row so far (on this CPU: 0.16-0.20 s of a 2.6 s run of 64 requests, before); small
  // batches keep their whole context (a queue's 64 rows fit the budget up to 4 sequences).
  int64_t catch_up_rows = 256;
  int64_t catch_up_min_rows = 4;
  // Each token id's text (special tokens empty), for requests in JSON mode; null: none allowed.
  std::shared_ptr<const std::vector<std::string>> token_bytes;
  // Prefix caching (prefix_cache.h): host memory for kept prompt prefixes; 0: off.
  int64_t prefix_cache_bytes = 0;
};

// Engine-wide counters (what a metrics endpoint reads).
struct EngineCounters {
  int64_t steps = 0, graph_steps = 0, prompt_tokens = 0, generation_tokens = 0;
  int64_t drafting_steps = 0, draft_tokens = 0, accepted_tokens = 0, preemptions = 0;
  std::vector<int64_t> accepted_per_position;
  // Where the time goes (what speculation control weighs): steps with decode rows by the drafts
  // they asked for (0..k), those that also carried prefill chunks, and the seconds of all steps,
  // of drafting and of the drafter's catch-up after k = 0 steps.
  std::vector<int64_t> decode_steps_per_k;
  int64_t mixed_steps = 0;
  double step_seconds = 0, draft_seconds = 0, catch_up_seconds = 0;
  int64_t catch_ups = 0;  // drafting steps after k = 0 steps (each ran Drafter::catch_up)
  // Prefix caching: admissions from a kept prefix, the prompt tokens they did not prefill, and
  // prefixes kept.
  int64_t prefix_hits = 0, cached_prompt_tokens = 0, prefixes_kept = 0;
};

class BatchEngine {
 public:
  // drafter may be null when num_speculative_tokens == 0. Sizes the pools (printing nothing: see
  // describe()), and on CUDA captures the step graphs.
  BatchEngine(Qwen35Model& model, std::unique_ptr<Drafter> drafter, BatchEngineOptions opt);
  ~BatchEngine();

  // Validates and queues a request (throws Error naming the problem: empty prompt, token id out of
  // range, prompt too long for --max-model-len, bad sampling parameters).
  RequestId add(Request req);
  // Cancels a request at once, releasing its slot and blocks; its final output (finish reason
  // "cancelled") comes with the next step(). Unknown or finished ids are ignored.
  void cancel(RequestId id);
  // Runs one step; returns what each request emitted or how it finished.
  std::vector<RequestOutput> step();
  bool idle() const { return scheduler_->idle() && pending_.empty(); }

  // Runs requests to completion (a convenience for offline batches and tests); results in order.
  std::vector<GenerateResult> run(std::vector<Request> reqs);
  // Teacher-forced logits of every prompt position (f32 [n, vocab], host), through the prefill
  // path on a slot of its own.
  Tensor score(const std::vector<int32_t>& ids);

  const GenerationStats& stats(RequestId id) const;
  const std::vector<int32_t>& generated(RequestId id) const;
  const SequenceCache& cache(RequestId id) const;
  const StatePool& pool() const { return *pool_; }
  StatePool& pool() { return *pool_; }
  const CacheConfig& cache_config() const { return pool_->config(); }
  const EngineCounters& counters() const { return counters_; }
  int64_t running() const { return scheduler_->running(); }
  int64_t waiting() const { return scheduler_->waiting(); }
  bool uses_cuda_graphs() const { return !graphs_.empty(); }
  Drafter* drafter() { return drafter_.get(); }
  Qwen35Model& model() { return model_; }
  std::string describe() const;  // start-up lines: pools, fits, graphs, speculation

  // Test hooks: after each commit of a request (the step index of that request, n_past), and
  // before each target step (its plan: rows and positions of every sequence).
  std::function<void(RequestId, int64_t, int64_t)> after_commit;
  std::function<void(const StepPlan&, std::span<const RequestId>)> before_step;

 private:
  // The step's phases (batch_step.cpp), each filling or reading one step's working set.
  struct StepRun;
  void propose_drafts(StepRun& r);
  void lay_out(StepRun& r);
  void run_model(StepRun& r);
  void accept_and_commit(StepRun& r, int64_t i);
  void commit_chunk(StepRun& r, size_t c);
  void trim_drafter_rows(const StepRun& r);
  Sequence& seq(RequestId id);
  const Sequence& seq(RequestId id) const;
  int64_t bucket_of(int64_t n) const;
  void capture_graphs();
  void finish(Sequence& s, const std::string& reason);
  // Appends tokens to s one by one until a stop condition; true when it finished. lps: the
  // tokens' logprobs (when asked for), kept for those emitted.
  bool emit(Sequence& s, std::span<const int32_t> tokens, RequestOutput& o,
            std::vector<TokenLogprobs> lps = {});
  // Prefix caching: after a prefill chunk, s's state if it has just reached the prefix its prompt
  // is kept at (PrefixCache::snapshot_length) and that prefix is not kept yet.
  void keep_prefix(const Sequence& s);
  // The target's token from a host logits row of s (sampled, penalised or with logprobs):
  // pending are the step's drafts before this row, position the token's, device_argmax the row's
  // argmax from the device (the answer when greedy and unpenalised).
  int32_t choose_on_host(const Sequence& s, const float* row, std::span<const int32_t> pending,
                         int64_t position, int32_t device_argmax, std::vector<TokenLogprobs>& lps);

  Qwen35Model& model_;
  std::unique_ptr<Drafter> drafter_;
  BatchEngineOptions opt_;
  int k_max_ = 0;
  std::unique_ptr<StatePool> pool_;
  std::unique_ptr<PrefixCache> prefix_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<StepBuffers> buffers_;
  Tensor logits_;      // f32 [max logit rows, vocab] on the model's device
  Tensor argmax_ids_;  // i32 [max logit rows]
  std::map<RequestId, std::unique_ptr<Sequence>> seqs_;
  std::vector<RequestOutput> pending_;  // cancellations reported by the next step
  std::vector<float> scratch_;          // a penalised logits row
  RequestId next_id_ = 0;
  int64_t next_order_ = 0;
  std::vector<int64_t> buckets_;  // graph batch sizes, ascending
  std::map<std::pair<int64_t, int>, std::unique_ptr<CudaGraph>> graphs_;  // (bucket, k)
  std::map<int64_t, SpeculationControl> control_;                         // by bucket
  int prev_k_ = -1;
  EngineCounters counters_;
};

}  // namespace tandem
