// Cost/acceptance-driven choice of k per step.
#include "spec/speculation_control.h"

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

int SpeculationControl::choose() {
  if (mode_ == ControlMode::kFixed || k_max_ == 0) return k_max_;
  // Measure every k once, largest first (it also observes acceptance at every position).
  for (int k = k_max_; k >= 0; --k)
    if (cost_[k] < 0) return k;
  if (probe_interval_ > 0 && step_ % probe_interval_ == probe_interval_ - 1) {
    int oldest = 0;
    for (int k = 1; k <= k_max_; ++k)
      if (last_seen_[k] < last_seen_[oldest]) oldest = k;
    return oldest;
  }
  int best = 0;
  double best_rate = 0.0;
  for (int k = 0; k <= k_max_; ++k) {
    const double rate = expected_tokens(k) / cost_[k];
    if (rate > best_rate) best_rate = rate, best = k;
  }
  return best;
}

void SpeculationControl::record(int k, int n_acc, double seconds) {
  constexpr double kAlpha = 0.25;
  cost_[k] = cost_[k] < 0 ? seconds : (1 - kAlpha) * cost_[k] + kAlpha * seconds;
  last_seen_[k] = step_++;
  ++steps_[k];
  for (int i = 0; i < k && i < n_acc; ++i) {  // draft i+1 was examined when i drafts were accepted
    ++reached_[i];
    if (i < n_acc - 1) ++accepted_[i];
  }
}

}  // namespace tandem
