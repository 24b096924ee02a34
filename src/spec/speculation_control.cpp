// Cost/acceptance-driven choice of k per step: robust (median) costs relative to the steps just
// before each sample, and a win for drafting only beyond the noise.
#include "spec/speculation_control.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tandem {

namespace {

double median(std::vector<double> v) {  // v not empty
  const size_t h = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + h, v.end());
  if (v.size() % 2 == 1) return v[h];
  return 0.5 * (v[h] + *std::max_element(v.begin(), v.begin() + h));
}

void push_bounded(std::vector<double>& v, double x, int n) {
  if (static_cast<int>(v.size()) == n) v.erase(v.begin());
  v.push_back(x);
}

}  // namespace

ControlMode parse_control_mode(const std::string& s) {
  if (s == "fixed") return ControlMode::kFixed;
  if (s == "adaptive") return ControlMode::kAdaptive;
  fail("--speculation-control must be fixed or adaptive, got '{}'", s);
}

SpeculationControl::SpeculationControl(int k_max, ControlMode mode, int probe_interval)
    : k_max_(k_max),
      mode_(mode),
      probe_interval_(probe_interval),
      window_(k_max + 1),
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

double SpeculationControl::optimistic_tokens(int k) const {
  double e = 1.0, reach = 1.0;
  for (int i = 0; i < k; ++i) {
    const double n = static_cast<double>(reached_[i]) + 2.0;
    const double a = (static_cast<double>(accepted_[i]) + 1.0) / n;
    reach *= std::min(1.0, a + std::sqrt(a * (1.0 - a) / n));  // one standard error up
    e += reach;
  }
  return e;
}

double SpeculationControl::relative_cost(int k) const {
  const std::vector<double>& w = window_[k];
  if (w.empty()) return -1.0;
  // Below 3 samples a median is a mean, that one slow sample (the usual outlier) would set.
  return w.size() < 3 ? *std::min_element(w.begin(), w.end()) : median(w);
}

double SpeculationControl::level() const {
  const int n = std::min<int>(kLevelSteps, static_cast<int>(levels_.size()));
  return median(std::vector<double>(levels_.end() - n, levels_.end()));
}

double SpeculationControl::spread() const {
  // Successive samples' differences, relative: insensitive to what drift is left in a window.
  // The median of |x_i - x_i-1| is 0.954 sigma for normal noise.
  std::vector<double> d;
  auto add = [&](const std::vector<double>& w) {
    if (w.size() < 2) return;
    const double m = median(w);
    for (size_t i = 1; i < w.size(); ++i) d.push_back(std::abs(w[i] - w[i - 1]) / m);
  };
  for (int k = 0; k <= k_max_; ++k) add(window_[k]);
  add(levels_);  // the base's steps
  return d.empty() ? 0.0 : median(d) / 0.954;
}

int SpeculationControl::best_draft() const {
  int best = 0;
  double best_rate = 0.0;
  for (int k = 1; k <= k_max_; ++k) {
    if (window_[k].empty()) continue;
    const double rate = expected_tokens(k) / relative_cost(k);
    if (rate > best_rate) best_rate = rate, best = k;
  }
  return best;
}

double SpeculationControl::gain(int k) const {
  return expected_tokens(k) / relative_cost(k) * relative_cost(0) - 1.0;  // E_0 = 1
}

double SpeculationControl::noise_margin(int k) const {
  // Standard error of a median of n samples: 1.25 sigma / sqrt(n).
  // The base is measured at every step it runs: as many samples as a full window.
  const double s = 1.2533 * spread();
  auto se = [&](int j) {
    const size_t n = j == base_ ? kWindow : window_[j].size();
    return s / std::sqrt(static_cast<double>(n));
  };
  return kZ * std::hypot(se(k), se(0));
}

int SpeculationControl::best_measured() const {
  const int d = best_draft();
  if (d == 0 || window_[0].empty()) return d;
  return gain(d) > kMargin + noise_margin(d) ? d : 0;  // ties and doubt go to plain
}

int SpeculationControl::choose() {
  if (mode_ == ControlMode::kFixed || k_max_ == 0) return k_max_;
  // Climb: measure k = 0, then k + 1 only while the largest k measured so far is the best, so
  // that an expensive large k is never tried where a smaller one already lost.
  int top = -1;
  while (top < k_max_ && samples_[top + 1] >= (top < 0 ? kPlainSamples : kSamplesToClimb)) ++top;
  const int best = best_measured();
  if (top < 1 || (best == top && top < k_max_)) return top + 1;
  // A switch's step records no cost: a k just switched to (not the best) runs once more.
  if (switched_ && last_k_ != best) return last_k_;
  // A drafting k that wins by kMargin but not yet by the noise: measure it again, up to kWindow.
  if (const int d = best_draft(); best == 0 && d > 0) {
    const double hoped = optimistic_tokens(d) / expected_tokens(d) * (1.0 + gain(d)) - 1.0;
    if (hoped > kMargin && static_cast<int>(window_[d].size()) < kWindow) return d;
  }
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
  const int best_before = best_measured();
  for (int n_acc : n_accs) {
    for (int i = 0; i < k && i < n_acc; ++i) {  // draft i+1 was examined when i were accepted
      ++reached_[i];
      if (i < n_acc - 1) ++accepted_[i];
    }
  }
  switched_ = k != last_k_;
  last_k_ = k;
  if (step_ >= kWarmupSteps) {
    const double c = std::max(seconds - catch_up_seconds, 1e-9);
    if (window_[base_].empty()) window_[base_].push_back(1.0);  // the unit: the first base's cost
    // The level: the base's recent steps; before any, this step's if it is the base's.
    const double l = !levels_.empty() ? level() : k == base_ ? c / relative_cost(k) : c;
    if (switched_) {
      switch_cost_ = (c + catch_up_seconds) / l;  // not k's: caches, catch-up, replays of the last
      switch_catch_up_ = catch_up_seconds / l;
    } else {
      ++samples_[k];
      if (k == base_) {
        push_bounded(levels_, c / relative_cost(k), kWindow);
      } else {
        push_bounded(window_[k], c / l, kWindow);
      }
      if (k != best_before && !window_[best_before].empty()) {
        // What a measurement of another k (a probe, exploration) loses against the best k, in
        // best-k steps, its switch step included (for a k's first only the catch-up, and only
        // once acceptance is known: cold costs are one-time), with k's acceptance one standard
        // error up (while that is uncertain, probes come sooner); the next probe waits long
        // enough to keep such losses within kProbeBudget of the time. A k that did clearly better
        // than the best (an estimate an outlier spoilt, or a change) is looked at again soon.
        const double r_best = relative_cost(best_before);
        const double per_token = r_best / expected_tokens(best_before);  // at the best k
        const double at_best = expected_tokens(k) * per_token;
        const double hoped = optimistic_tokens(k) * per_token;
        double lost = relative_cost(k) - hoped;
        if (switch_cost_ >= 0 && samples_[k] > 1) {
          lost += switch_cost_ - hoped;
        } else if (switch_cost_ >= 0 && reached_[0] >= kAcceptanceSamples) {
          lost += switch_catch_up_;  // a k's first switch: its catch-up recurs, its cold costs not
        }
        const double bar = 1.0 + kMargin;  // better by more than a tie (and the noise, for one)
        if (c / l * (bar + spread()) < at_best || relative_cost(k) * bar < at_best) {
          probe_gap_ = kFirstProbeGap;
          next_probe_ = std::min(next_probe_, step_ + kFirstProbeGap);
        } else if (lost > 0) {
          next_probe_ =
              std::max(next_probe_, step_ + static_cast<int64_t>(lost / r_best / kProbeBudget));
        }
      }
      switch_cost_ = -1.0;
    }
  }
  last_seen_[k] = step_++;
  ++steps_[k];
  base_ = best_measured();
  if (base_ != best_before) probe_gap_ = kFirstProbeGap;  // probe again soon
}

}  // namespace tandem
