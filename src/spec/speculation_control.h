// Speculation control (DESIGN.md section 3): picks the number of drafts for each step, 0..k_max,
// to maximise expected tokens per second from measured step costs and observed acceptance, so
// that speculation is never a net loss. Greedy output does not depend on the choice (exactness
// holds for every k), so control only changes speed.
//   expected tokens of a step with k drafts: E_k = 1 + a_1 + a_1 a_2 + ... + a_1..a_k, where a_i is
//   the observed rate of accepting draft i given drafts 1..i-1 were accepted (Laplace-smoothed);
//   cost c_k: an exponential moving average of the measured wall seconds of steps with k drafts.
// A step's cost is its wall time less the drafter's catch-up, its first pass over the rows of
// earlier k = 0 steps (the caller measures it): that pass is paid once per switch to drafting, not
// per step, and charging it to the step made every probe after a run of k = 0 steps look like a
// loss, so that drafting never resumed. A k = 0 step is charged what it costs, no more.
// One-time costs: the first kWarmupSteps steps of a generation (cold caches, first replays) record
// no cost, and a k's second cost sample replaces its first instead of averaging with it.
// Exploration climbs: k = 0 and 1 are measured first (two samples each), then k + 1 only while the
// largest k measured is the best so far (a large k, the most expensive step, is never tried once a
// smaller k has lost: short generations cannot afford it). Then the best E_k / c_k is used, and
// now and then the less recently measured neighbour of the best k is measured again, so that
// costs follow the context depth and an unlucky early estimate is corrected: the gap between
// probes starts at kFirstProbeGap steps and doubles up to `probe_interval` while the best k stays
// the same (up to kPlainProbeFactor times that while k = 0 is best). Drafting counts as better
// than plain decoding only by a margin (kMargin): ties go to plain.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tandem {

enum class ControlMode { kFixed, kAdaptive };
ControlMode parse_control_mode(const std::string& s);  // "fixed" | "adaptive"

class SpeculationControl {
 public:
  SpeculationControl(int k_max, ControlMode mode, int probe_interval = 32);

  int choose();  // drafts for the next step
  // One finished step: k drafts proposed, n_acc in 1..k+1, its wall time (draft + verify +
  // commit) and the part of it spent catching up on earlier k = 0 steps' rows.
  void record(int k, int n_acc, double seconds, double catch_up_seconds = 0.0);
  // A step of a batch: every sequence drafted k tokens (n_accs: each one's n_acc); the cost is
  // the step's, the acceptance counts every sequence. Expected tokens per sequence over the cost
  // of a step of that batch is the rate being maximised (the batch size is fixed per controller).
  void record_batch(int k, std::span<const int> n_accs, double seconds,
                    double catch_up_seconds = 0.0);
  static constexpr int kWarmupSteps = 2;
  static constexpr int kFirstProbeGap = 8;
  static constexpr int kSamplesToClimb = 2;
  // Drafting must beat plain decoding by this fraction: drafting costs what its steps do
  // not show (the drafter's catch-up after k = 0 steps, work that lands in the next step), and
  // picking a tie on noise lost 4-8% to plain on the shipped model at 64-256 sequences (H200).
  static constexpr double kMargin = 0.03;
  // While plain decoding is best, probes space out to this many times probe_interval.
  static constexpr int kPlainProbeFactor = 4;

  double expected_tokens(int k) const;
  int best_measured() const;  // the measured k with the largest E_k / c_k
  const std::vector<int64_t>& steps_per_k() const { return steps_; }

 private:
  int k_max_;
  ControlMode mode_;
  int probe_interval_;
  int64_t step_ = 0;
  int64_t next_probe_ = kFirstProbeGap, probe_gap_ = kFirstProbeGap;
  std::vector<double> cost_;        // EMA seconds per step with k drafts; < 0 until measured
  std::vector<int64_t> last_seen_;  // step index of the last measurement of each k
  std::vector<int64_t> steps_;      // steps taken with each k
  std::vector<int64_t> samples_;    // cost samples of each k
  std::vector<int64_t> reached_, accepted_;  // per draft position i (1-based, index i-1)
};

}  // namespace tandem
