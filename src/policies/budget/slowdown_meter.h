// SPDX-License-Identifier: Apache-2.0
// How much slower a guaranteed tenant's GPU work runs than alone: the measure its latency budget is
// judged on. A pure data structure, fed the tenant's timed launches (slots::TimedLaunch).
//
// Definition. Every timed launch (a kernel, or a graph replay: one decode step) has a shape (kernel
// and grid, or graph). Its solo time is the median of the last `solo_keep` launches of that shape
// timed while no best-effort work could run beside it (the time gate says which: every other
// tenant's gate closed for at least the settle time); its ratio is its duration over that. Launches
// of one shape vary alone too (a decode step's attention grows with the context), so the ratios are
// judged against their own spread alone: the tenant's slowdown at quantile q is the q-quantile of
// the ratios of its launches timed in the window over the q-quantile of the ratios of its last
// `solo_ref_keep` solo launches. Quantiles are weighted by solo time, so that they speak of the
// tenant's GPU time (a 4 ms decode step counts 400 times a 10 us kernel); shapes whose solo time is
// below `min_judged_ns` are not judged at all (their timing is mostly the launch's own latency).
// The budget holds when the slowdown at p99 over the window is at most the budget.
//
// With `interval_ns` set, the quantile is taken over intervals instead of launches: each interval's
// weighted mean ratio, for the window and for the solo reference alike. That is what a server's
// requests see: a TPOT is the mean of a request's ~30 steps, so one best-effort kernel in one step
// of 50 costs it 2% of that kernel, where the per-launch p99 would count the whole kernel as soon as
// more than 1% of the steps had one (on the H200 it read 1.13-1.16 at a best-effort share of 0.2-2%
// while the server's TPOT p99 was 0.87x of exclusive).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

namespace gpuos::policies::budget {

struct MeterParams {
  uint64_t window_ns = 1'000'000'000;
  uint32_t solo_keep = 16;   // solo timings kept per shape (their median is the solo time)
  uint32_t min_solo = 3;     // a shape has a solo time once this many were timed
  uint32_t max_shapes = 64;  // beyond, the shape seen least recently is forgotten
  uint32_t max_window = 4096;  // ratios kept in the window at most (the oldest go first)
  uint32_t solo_ref_keep = 1024;  // solo ratios kept as the reference of the spread alone
  uint64_t min_judged_ns = 50'000;
  uint64_t interval_ns = 0;  // 0: the quantile over launches; else over these intervals' means
};

// Which launches a slowdown is taken over: all, or its admissions (their key carries
// GPUOS_TIMING_KEY_ADMISSION: made while its engine said it admits requests, or marked long by its
// own timings; the prefill of new requests, what TTFT from admission waits for), or the rest (its
// steps: TPOT).
enum class Launches { kAll, kSteps, kAdmissions };

class SlowdownMeter {
 public:
  explicit SlowdownMeter(MeterParams p = {}) : p_(p) {}

  // One timed launch that ended by `now`; solo: no best-effort work can have run beside it.
  void add(uint64_t key, uint64_t ns, bool solo, uint64_t now);

  // The slowdown at quantile q of the launches added in (now - span_ns, now] (see above); 0 when
  // there are none. *count: how many there were.
  double slowdown(double q, uint64_t now, uint64_t span_ns, std::size_t* count = nullptr,
                  Launches which = Launches::kAll) const;
  double window_p99(uint64_t now, std::size_t* count = nullptr) const {
    return slowdown(0.99, now, p_.window_ns, count);
  }

  // With interval_ns: the last interval that ended by `now` ([end - interval_ns, end), end the
  // last multiple of interval_ns at or before now): its weighted mean ratio over the q-quantile of
  // the solo reference, and *end_ns. 0 (and *count 0) with no launch in it, or without intervals.
  double last_interval(double q, uint64_t now, uint64_t* end_ns, std::size_t* count = nullptr) const;
  // ... that interval's end alone (0 without intervals): whether it is a new one costs no judging.
  uint64_t interval_end(uint64_t now) const;

  // How much more GPU time alone the steps in (now - span_ns, now] stand for than the solo steps
  // do, each on average (1 = the same; 0 when either has none): a server whose steps slowed holds
  // more requests, so its steps take larger shapes (a bigger batch), and its TPOT grows by the
  // slowdown times this. Steps only (every launch, until admissions are marked): a window's
  // mix of prefills and steps differs from the solo reference's by chance, and an 8B server's
  // growth read 1.17-1.39 (4.47 once) over all its launches while its decode batch grew 1.13x
  // (bench/results/2026-12-06-8b-fit-h100-0.3).
  double load_growth(uint64_t now, uint64_t span_ns, Launches which = Launches::kSteps) const;

  // The same at the tail: the q-quantile of the times alone of the `which` launches in
  // (now - span_ns, now] over that of the solo reference's, weighted by time alone as the slowdown
  // is (1 = the same; 0 when either has none). A server prefills its waiting requests together, so
  // when its steps slow, more wait for each admission, and the tail of its TTFT from admission moves
  // to larger prefills that each read as fast as alone: at 50% load its admissions read 1.01-1.17
  // against their own shapes while TTFT from admission p99 was 1.56-1.57x
  // (bench/results/2026-12-06-wgi100a-h100-0.5). Reported, not yet steered by.
  double tail_growth(double q, uint64_t now, uint64_t span_ns, Launches which) const;

  // The mean over step-sized launches only: those whose time alone is at least half the solo
  // reference's time-weighted median (its decode step), the window's mean time alone over the
  // reference's. How many short kernels were timed does not move it (the mean's fault), and a
  // decode batch that moves up a graph bucket moves it by that bucket's time (the median stays on
  // one shape until half the time moved: beside training at 10% load the 1B server's batch grew
  // 2.7 -> 3.7 and its decode step 1.48x while the median read 0.99-1.02,
  // bench/results/2026-12-07-zoo-1b-0.1-*).
  double step_mean_growth(uint64_t now, uint64_t span_ns, Launches which = Launches::kSteps) const;

  // How many steps of (now - span_ns, now] and of the solo reference the growths compare.
  void growth_counts(uint64_t now, uint64_t span_ns, std::size_t* window, std::size_t* solo) const;

  // A shape's solo time (0 = not known yet), and whether any shape has one.
  double solo_ns(uint64_t key) const;
  bool has_solo() const;
  // The median solo time over the judged shapes that have one (what one launch of the tenant is).
  double typical_solo_ns() const;

 private:
  struct Shape {
    std::deque<uint64_t> solo;  // the last solo_keep solo timings
    double median = 0;
    uint64_t seen_ns = 0;
  };
  void forget_oldest_shape();
  // The times alone (their shapes' solo times) of the `which` launches in (now - span_ns, now],
  // and of the solo reference's: what load_growth and tail_growth compare.
  void alone_times(uint64_t now, uint64_t span_ns, Launches which, std::vector<double>* window,
                   std::vector<double>* solo) const;

  struct Ratio {
    uint64_t at_ns = 0;  // when it was added
    double ratio = 0;
    double weight = 0;   // its shape's solo time
    bool admission = false;
  };
  MeterParams p_;
  std::map<uint64_t, Shape> shapes_;
  std::deque<Ratio> window_;    // oldest first
  std::deque<Ratio> solo_ref_;  // the last solo ratios
};

// The weighted q-quantile of values (the smallest value with at least q of the weight at or
// below it); 0 for none.
double weighted_quantile(std::vector<std::pair<double, double>> value_weight, double q);
// ... of durations, each weighted by itself (q of their total time is in values no larger).
double self_weighted_quantile(const std::vector<double>& values, double q);

}  // namespace gpuos::policies::budget
