// Cost/acceptance-driven choice of k per step.
#include "spec/speculation_control.h"

#include <algorithm>

#include "core/error.h"

namespace tandem {

ControlMode parse_control_mode(const std::string& s) {
  if (s == "fixed") return ControlMode::kFixed;
  if (s == "adaptive") return ControlMode::kAdaptive;
  fail("--speculation-control must be fixed or adaptive, got '{}'", s);
}

SpeculationControl::SpeculationControl(int k_max, ControlMode mode, int probe_interval)
    : k_max_(k_max),
      mode_(mode),
      probe_interval_(probe_interval),
      cost_(k_max + 1, -1.0),
      last_seen_(k_max + 1, -1),
      steps_(k_max + 1, 0),
      samples_(k_max + 1, 0),
      reached_(k_max, 0),
      accepted_(k_max, 0) {}

double SpeculationControl::expected_tokens(int k) const {
  double e = 1.0, reach = 1.0;
  for (int i = 0; i < k; ++i) {
    reach *= (static_cast<double>(accepted_[i]) + 1.0) / (static_cast<double>(reached_[i]) + 2.0);
    e += reach;
  }
  return e;
}

int SpeculationControl::best_measured() const {
  int best = 0;
  double best_rate = 0.0;
  for (int k = 0; k <= k_max_; ++k) {
    if (cost_[k] < 0) continue;
    const double rate = expected_tokens(k) / cost_[k];
    const double bar = best == 0 && best_rate > 0 ? 1.0 + kMargin : 1.0;  // ties go to plain
    if (rate > best_rate * bar) best_rate = rate, best = k;
  }
  return best;
}

int SpeculationControl::choose() {
  if (mode_ == ControlMode::kFixed || k_max_ == 0) return k_max_;
  // Climb: measure k = 0, then k + 1 only while the largest k measured so far is the best, so
  // that an expensive large k is never tried where a smaller one already lost.
  int top = -1;
  while (top < k_max_ && samples_[top + 1] >= kSamplesToClimb) ++top;
  const int best = best_measured();
  if (top < 1 || (best == top && top < k_max_)) return top + 1;
  if (probe_interval_ > 0 && step_ >= next_probe_) {
    next_probe_ = step_ + probe_gap_;
    probe_gap_ = std::min<int64_t>(
        2 * probe_gap_, best == 0 ? kPlainProbeFactor * probe_interval_ : probe_interval_);
    // Probe the less recently measured neighbour of the best k (costs follow the context depth).
    const int lo = std::max(best - 1, 0), hi = std::min(best + 1, k_max_);
    if (lo == best) return hi;
    if (hi == best) return lo;
    return last_seen_[lo] <= last_seen_[hi] ? lo : hi;
  }
  return best;
}

void SpeculationControl::record(int k, int n_acc, double seconds, double catch_up_seconds) {
  record_batch(k, std::span<const int>(&n_acc, 1), seconds, catch_up_seconds);
}

void SpeculationControl::record_batch(int k, std::span<const int> n_accs, double seconds,
                                      double catch_up_seconds) {
  constexpr double kAlpha = 0.25;
  const int best_before = best_measured();
  if (step_ >= kWarmupSteps) {
    const double c = seconds - catch_up_seconds;
    cost_[k] = ++samples_[k] <= 2 ? c : (1 - kAlpha) * cost_[k] + kAlpha * c;
  }
  last_seen_[k] = step_++;
  ++steps_[k];
  for (int n_acc : n_accs) {
    for (int i = 0; i < k && i < n_acc; ++i) {  // draft i+1 was examined when i were accepted
      ++reached_[i];
      if (i < n_acc - 1) ++accepted_[i];
    }
  }
  if (best_measured() != best_before) probe_gap_ = kFirstProbeGap;  // probe again soon
}

}  // namespace tandem
