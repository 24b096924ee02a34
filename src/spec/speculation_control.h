// Speculation control (DESIGN.md section 3): picks the number of drafts for each step, 0..k_max,
// to maximise expected tokens per second from measured step costs and observed acceptance, so
// that speculation is never a net loss. Greedy output does not depend on the choice (exactness
// holds for every k), so control only changes speed.
//   expected tokens of a step with k drafts: E_k = 1 + a_1 + a_1 a_2 + ... + a_1..a_k, where a_i is
//   the observed rate of accepting draft i given drafts 1..i-1 were accepted (Laplace-smoothed);
//   relative cost r_k: the median of k's last kWindow cost samples (the smallest while fewer than
//   3: the usual outlier is a slow step), each divided by the level at the time, the median of
//   the base's last kLevelSteps steps (the base is the best k; its relative cost stays fixed while
//   it runs, so that the units do not wander). A sample of k is so compared with the steps just
//   before it: costs drift with context depth and machine load by more than the differences
//   being weighed, and a moving average of samples taken hundreds of steps apart was stale.
// Noise: drafting (the best k > 0) counts as better than plain decoding only when E_k / r_k beats
// E_0 / r_0 by kMargin plus kZ standard errors of the two medians (1.25 s / sqrt(n) each, s the
// pooled robust spread of successive samples); ties and doubt go to plain. A k whose estimate wins
// by kMargin (with its acceptance one standard error up) but not beyond the noise is measured
// again, up to kWindow samples, before it is believed.
// A step's cost is its wall time less the drafter's catch-up (its first pass over the rows of
// earlier k = 0 steps; the caller measures it), which is paid once per switch to drafting, not
// per step. The first step after a change of k records no cost at all: its catch-up, cold caches
// and the replay of the previous step's rows belong to the switch, not to k (on the CPU at batch 1
// the first drafting step after a run of plain ones cost 1.3 times the next), so a k switched to
// runs twice. The first kWarmupSteps steps of a generation record nothing.
// Exploration climbs: k = 0 is measured first (kPlainSamples steps, free against plain decoding),
// then k = 1 (kSamplesToClimb samples), then k + 1 only while the largest k measured is the best
// (a large k, the most expensive step, is never tried once a smaller k has lost: short
// generations cannot afford it). Then the best k runs, and now and then the less recently
// measured neighbour of the best k is probed (costs follow the context depth, and an unlucky
// estimate is corrected): the gap between probes starts at kFirstProbeGap steps and doubles up to
// `probe_interval` while the best k stays the same (up to kPlainProbeFactor times that while k = 0
// is best), and is never shorter than what keeps the probes' losses (their switch steps and
// catch-ups included) within kProbeBudget of the time; a probe that did clearly better than the
// best is repeated soon.
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
  // Samples of a k (after its switch step) before the climb goes on: the smaller of 2 shrugs off
  // one slow step.
  static constexpr int kSamplesToClimb = 2;
  // Plain steps measured before k = 1 is explored (free against plain decoding): k = 1 is then
  // compared with a median of 7; two plain samples, one of them slow, made k = 1 look a win.
  static constexpr int kPlainSamples = 7;
  // Recent cost samples kept per k: their median shrugs off outliers, up to 7 of 16.
  static constexpr int kWindow = 16;
  // The base's steps whose median is the level: 4 slow ones in a row (a prompt's first pass, a
  // busy neighbour) do not move it; a lasting change of cost does within 5 steps.
  static constexpr int kLevelSteps = 9;
  // Drafting must beat plain decoding by this fraction on top of the noise: drafting costs what
  // its steps do not show (the drafter's catch-up after k = 0 steps, work that lands in the next
  // step), and picking a tie on noise lost 4-8% to plain on the shipped model at 64-256 sequences
  // (H200).
  static constexpr double kMargin = 0.03;
  // Standard errors of the cost medians that a drafting win must also exceed (one-sided, ~93%;
  // 2 lost a third of the 15% wins in a simulated noisy world, 1 let small losses through).
  static constexpr double kZ = 1.5;
  // While plain decoding is best, probes space out to this many times probe_interval.
  static constexpr int kPlainProbeFactor = 4;
  // Drafts observed before a first switch's catch-up counts in what probing loses: at batch 1
  // the first few drafts of a generation say little about the rest.
  static constexpr int kAcceptanceSamples = 16;
  // Measurements of a k other than the best (probes, exploration) may lose at most this fraction
  // of the time against the best k.
  static constexpr double kProbeBudget = 0.01;

  double expected_tokens(int k) const;
  int best_measured() const;  // k > 0 only where it beats plain beyond kMargin and the noise
  const std::vector<int64_t>& steps_per_k() const { return steps_; }

 private:
  double optimistic_tokens(int k) const;  // E_k with each a_i one standard error higher
  double relative_cost(int k) const;      // r_k; < 0 until measured
  double level() const;                   // median of the base's recent costs / its r
  double spread() const;                  // pooled robust relative spread of the samples
  int best_draft() const;            // the measured k > 0 with the largest E_k / r_k; 0 if none
  double gain(int k) const;          // (E_k / r_k) / (E_0 / r_0) - 1
  double noise_margin(int k) const;  // kZ standard errors of the two medians, relative

  int k_max_;
  ControlMode mode_;
  int probe_interval_;
  int64_t step_ = 0;
  int64_t next_probe_ = kFirstProbeGap, probe_gap_ = kFirstProbeGap;
  int base_ = 0;                // the best k: its steps set the level, its relative cost is fixed
  int last_k_ = -1;             // k of the last step
  bool switched_ = false;       // the last step's k differed from the one before
  double switch_cost_ = -1.0;   // the last step's cost / level when it switched; < 0 otherwise
  double switch_catch_up_ = 0;  // its catch-up / level
  std::vector<std::vector<double>> window_;  // per k: last kWindow costs / level, oldest first
  std::vector<double> levels_;               // the base's last kWindow steps' cost / its r
  std::vector<int64_t> last_seen_;           // step index of the last measurement of each k
  std::vector<int64_t> steps_;               // steps taken with each k
  std::vector<int64_t> samples_;             // cost samples of each k (switch steps have none)
  std::vector<int64_t> reached_, accepted_;  // per draft position i (1-based, index i-1)
};

}  // namespace tandem
