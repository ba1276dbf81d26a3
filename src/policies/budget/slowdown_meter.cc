// SPDX-License-Identifier: Apache-2.0
#include "policies/budget/slowdown_meter.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>

#include "gpuos/abi.h"

namespace gpuos::policies::budget {
namespace {

double median_of(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return static_cast<double>(v[mid]);
}

// Whether a launch (an admission or a step) is one of `which`.
bool counted(Launches which, bool admission) {
  return which == Launches::kAll || admission == (which == Launches::kAdmissions);
}

// (value, weight) pairs to judge: each ratio, or with interval_ns each interval's weighted mean
// ratio, weighted by its launches' weight.
template <typename It>
std::vector<std::pair<double, double>> judged(It first, It last, uint64_t interval_ns, Launches which) {
  std::vector<std::pair<double, double>> out;
  if (interval_ns == 0) {
    for (It it = first; it != last; ++it) {
      if (counted(which, it->admission)) out.emplace_back(it->ratio, it->weight);
    }
    return out;
  }
  std::map<uint64_t, std::pair<double, double>> sums;  // interval -> (sum of ratio x weight, weight)
  for (It it = first; it != last; ++it) {
    if (!counted(which, it->admission)) continue;
    auto& [rw, w] = sums[it->at_ns / interval_ns];
    rw += it->ratio * it->weight;
    w += it->weight;
  }
  for (const auto& [interval, sw] : sums) {
    if (sw.second > 0) out.emplace_back(sw.first / sw.second, sw.second);
  }
  return out;
}

}  // namespace

void SlowdownMeter::add(uint64_t key, uint64_t ns, bool solo, uint64_t now) {
  if (ns == 0) return;
  auto it = shapes_.find(key);
  if (it == shapes_.end()) {
    if (shapes_.size() >= p_.max_shapes) forget_oldest_shape();
    it = shapes_.emplace(key, Shape{}).first;
  }
  Shape& s = it->second;
  s.seen_ns = now;
  if (solo) {
    s.solo.push_back(ns);
    if (s.solo.size() > p_.solo_keep) s.solo.pop_front();
    s.median = s.solo.size() >= p_.min_solo ? median_of({s.solo.begin(), s.solo.end()}) : 0;
  }
  if (s.median <= 0 || s.median < static_cast<double>(p_.min_judged_ns)) return;
  const Ratio r{now, static_cast<double>(ns) / s.median, s.median, (key & GPUOS_TIMING_KEY_ADMISSION) != 0};
  window_.push_back(r);
  while (!window_.empty() && (window_.size() > p_.max_window || window_.front().at_ns + p_.window_ns < now)) {
    window_.pop_front();
  }
  if (solo) {
    solo_ref_.push_back(r);
    if (solo_ref_.size() > p_.solo_ref_keep) solo_ref_.pop_front();
  }
}

double weighted_quantile(std::vector<std::pair<double, double>> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double total = 0;
  for (const auto& [value, weight] : v) total += weight;
  double below = 0;
  for (const auto& [value, weight] : v) {
    below += weight;
    if (below >= q * total) return value;
  }
  return v.back().first;
}

double self_weighted_quantile(const std::vector<double>& values, double q) {
  std::vector<std::pair<double, double>> value_weight;
  value_weight.reserve(values.size());
  for (double v : values) value_weight.emplace_back(v, v);
  return weighted_quantile(std::move(value_weight), q);
}

double SlowdownMeter::slowdown(double q, uint64_t now, uint64_t span_ns, std::size_t* count, Launches which) const {
  auto first = window_.end();
  while (first != window_.begin() && std::prev(first)->at_ns + span_ns > now) --first;
  const auto launches = static_cast<std::size_t>(
      std::count_if(first, window_.end(), [which](const Ratio& r) { return counted(which, r.admission); }));
  if (count != nullptr) *count = launches;
  if (launches == 0) return 0;
  const double reference = weighted_quantile(judged(solo_ref_.begin(), solo_ref_.end(), p_.interval_ns, which), q);
  const double value = weighted_quantile(judged(first, window_.end(), p_.interval_ns, which), q);
  return reference > 0 ? value / reference : value;
}

uint64_t SlowdownMeter::interval_end(uint64_t now) const {
  return p_.interval_ns == 0 ? 0 : now / p_.interval_ns * p_.interval_ns;
}

double SlowdownMeter::last_interval(double q, uint64_t now, uint64_t* end_ns, std::size_t* count) const {
  if (count != nullptr) *count = 0;
  *end_ns = interval_end(now);
  if (p_.interval_ns == 0 || *end_ns < p_.interval_ns) return 0;
  // The window's launches in [end - interval, end): one interval of judged().
  auto last = window_.end();
  while (last != window_.begin() && std::prev(last)->at_ns >= *end_ns) --last;
  auto first = last;
  while (first != window_.begin() && std::prev(first)->at_ns >= *end_ns - p_.interval_ns) --first;
  if (count != nullptr) *count = static_cast<std::size_t>(std::distance(first, last));
  const auto value = judged(first, last, p_.interval_ns, Launches::kAll);
  if (value.empty()) return 0;
  const double reference =
      weighted_quantile(judged(solo_ref_.begin(), solo_ref_.end(), p_.interval_ns, Launches::kAll), q);
  return reference > 0 ? value.front().first / reference : value.front().first;
}

void SlowdownMeter::alone_times(uint64_t now, uint64_t span_ns, Launches which, std::vector<double>* window,
                                std::vector<double>* solo) const {
  for (auto it = window_.rbegin(); it != window_.rend() && it->at_ns + span_ns > now; ++it) {
    if (counted(which, it->admission)) window->push_back(it->weight);
  }
  for (const Ratio& r : solo_ref_) {
    if (counted(which, r.admission)) solo->push_back(r.weight);
  }
}

double SlowdownMeter::load_growth(uint64_t now, uint64_t span_ns, Launches which) const {
  std::vector<double> window, solo;
  alone_times(now, span_ns, which, &window, &solo);
  const double solo_sum = std::accumulate(solo.begin(), solo.end(), 0.0);
  if (window.empty() || solo.empty() || solo_sum <= 0) return 0;
  const double window_sum = std::accumulate(window.begin(), window.end(), 0.0);
  return (window_sum / static_cast<double>(window.size())) / (solo_sum / static_cast<double>(solo.size()));
}

double SlowdownMeter::step_mean_growth(uint64_t now, uint64_t span_ns, Launches which) const {
  std::vector<double> window, solo;
  alone_times(now, span_ns, which, &window, &solo);
  const double step = self_weighted_quantile(solo, 0.5) / 2;
  auto mean_of_steps = [step](const std::vector<double>& v) {
    double sum = 0;
    std::size_t n = 0;
    for (double x : v) {
      if (x < step) continue;
      sum += x;
      ++n;
    }
    return n != 0 ? sum / static_cast<double>(n) : 0.0;
  };
  const double reference = mean_of_steps(solo);
  if (step <= 0 || reference <= 0) return 0;
  return mean_of_steps(window) / reference;
}

void SlowdownMeter::growth_counts(uint64_t now, uint64_t span_ns, std::size_t* window, std::size_t* solo) const {
  std::vector<double> w, s;
  alone_times(now, span_ns, Launches::kSteps, &w, &s);
  *window = w.size();
  *solo = s.size();
}

double SlowdownMeter::tail_growth(double q, uint64_t now, uint64_t span_ns, Launches which) const {
  std::vector<double> window, solo;
  alone_times(now, span_ns, which, &window, &solo);
  // Weighted by time alone, as the slowdown's quantiles are.
  const double reference = self_weighted_quantile(solo, q);
  if (window.empty() || reference <= 0) return 0;
  return self_weighted_quantile(window, q) / reference;
}

double SlowdownMeter::solo_ns(uint64_t key) const {
  auto it = shapes_.find(key);
  return it == shapes_.end() ? 0 : it->second.median;
}

bool SlowdownMeter::has_solo() const {
  return std::any_of(shapes_.begin(), shapes_.end(), [](const auto& e) { return e.second.median > 0; });
}

double SlowdownMeter::typical_solo_ns() const {
  std::vector<uint64_t> v;
  for (const auto& [key, s] : shapes_) {
    if (s.median >= static_cast<double>(p_.min_judged_ns)) v.push_back(static_cast<uint64_t>(s.median));
  }
  return median_of(std::move(v));
}

void SlowdownMeter::forget_oldest_shape() {
  auto oldest = std::min_element(shapes_.begin(), shapes_.end(),
                                 [](const auto& a, const auto& b) { return a.second.seen_ns < b.second.seen_ns; });
  if (oldest != shapes_.end()) shapes_.erase(oldest);
}

}  // namespace gpuos::policies::budget
