// Speculation control (DESIGN.md section 3): picks the number of drafts for each step, 0..k_max,
// to maximise expected tokens per second from measured step costs and observed acceptance, so
// that speculation is never a net loss. Greedy output does not depend on the choice (exactness
// holds for every k), so control only changes speed.
//   expected tokens of a step with k drafts: E_k = 1 + a_1 + a_1 a_2 + ... + a_1..a_k, where a_i is
//   the observed rate of accepting draft i given drafts 1..i-1 were accepted (Laplace-smoothed);
//   cost c_k: an exponential moving average of the measured wall seconds of steps with k drafts.
// A step's cost is its whole wall time, including the drafter's first pass over the rows of earlier
// k = 0 steps when it catches up on them: a k = 0 step is charged what it costs, no more, so the
// catch-up weighs on speculation, never on plain decoding (the safe side of "never slower").
// Exploration climbs: k = 0 and 1 are measured first, then k + 1 only while the largest k measured
// is the best so far (a large k, the most expensive step, is never tried once a smaller k has
// lost: short generations cannot afford it). Then the best E_k / c_k is used, and every
// `probe_interval` steps the less recently measured neighbour of the best k is measured again, so
// that costs follow the context depth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

enum class ControlMode { kFixed, kAdaptive };
ControlMode parse_control_mode(const std::string& s);  // "fixed" | "adaptive"

class SpeculationControl {
 public:
  SpeculationControl(int k_max, ControlMode mode, int probe_interval = 32);

  int choose();  // drafts for the next step
  // One finished step: k drafts proposed, n_acc in 1..k+1, its wall time (draft, including any
  // first-pass catch-up, + verify + commit).
  void record(int k, int n_acc, double seconds);

  double expected_tokens(int k) const;
  int best_measured() const;  // the measured k with the largest E_k / c_k
  const std::vector<int64_t>& steps_per_k() const { return steps_; }

 private:
  int k_max_;
  ControlMode mode_;
  int probe_interval_;
  int64_t step_ = 0;
  std::vector<double> cost_;        // EMA seconds per step with k drafts; < 0 until measured
  std::vector<int64_t> last_seen_;  // step index of the last measurement of each k
  std::vector<int64_t> steps_;      // steps taken with each k
  std::vector<int64_t> reached_, accepted_;  // per draft position i (1-based, index i-1)
};

}  // namespace tandem
