// SPDX-License-Identifier: Apache-2.0
#include "policies/partition/sizer.h"
#include "policies/partition/sizer_stages.h"

#include <algorithm>

namespace gpuos::policies::partition {
namespace {

const LatencyPoint* point_at(const ShapeSamples& s, uint32_t sms) {
  for (const LatencyPoint& p : s.points) {
    if (p.sms == sms) return &p;
  }
  return nullptr;
}

uint64_t count_at(const ShapeSamples& s, uint32_t sms) {
  const LatencyPoint* p = point_at(s, sms);
  return p ? p->count : 0;
}

}  // namespace

LatencyModel fit_latency(const std::vector<LatencyPoint>& points, uint64_t min_count) {
  // Weighted least squares of l = m x + b with x = 1/t, weights = sample counts.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  uint32_t distinct = 0, only_sms = 0;
  double only_mean = 0;
  for (const LatencyPoint& p : points) {
    if (p.sms == 0 || p.count < std::max<uint64_t>(min_count, 1)) continue;
    const double w = static_cast<double>(p.count), x = 1.0 / p.sms;
    sw += w;
    sx += w * x;
    sy += w * p.mean_ns;
    sxx += w * x * x;
    sxy += w * x * p.mean_ns;
    ++distinct;
    only_sms = p.sms;
    only_mean = p.mean_ns;
  }
  LatencyModel model;
  if (distinct == 0) return model;
  if (distinct == 1) {
    model.m = only_mean * only_sms;  // pessimistic: all of it scales with SMs
    return model;
  }
  const double det = sw * sxx - sx * sx;
  if (det <= 0) return model;
  model.m = (sw * sxy - sx * sy) / det;
  model.b = (sy - model.m * sx) / sw;
  if (model.m < 0) {  // more SMs made it slower: the SMs buy nothing
    model.m = 0;
    model.b = sy / sw;
  } else if (model.b < 0) {  // through the origin: l = m/t
    model.b = 0;
    model.m = sxy / sxx;
  }
  model.fitted = true;
  return model;
}

// --- the stages of right_size (sizer_stages.h)

uint32_t size_at_or_below(const std::vector<uint32_t>& sizes, uint32_t ceiling) {
  if (std::find(sizes.begin(), sizes.end(), ceiling) != sizes.end()) return ceiling;
  // Not a size the GPU gives: the largest below it.
  auto it = std::upper_bound(sizes.begin(), sizes.end(), ceiling);
  return it == sizes.begin() ? sizes.front() : *(it - 1);
}

uint32_t current_size(const std::vector<uint32_t>& sizes, uint32_t ceiling, uint32_t chosen) {
  const uint32_t current = chosen == 0 ? ceiling : std::min(chosen, ceiling);
  return std::find(sizes.begin(), sizes.end(), current) != sizes.end() ? current : ceiling;
}

std::vector<ShapeSamples> counted_samples(const std::vector<ShapeSamples>& raw, const SizerState& state) {
  std::vector<ShapeSamples> out = raw;
  for (ShapeSamples& s : out) {
    for (const SizerState::SampleSum& x : state.discounted) {
      if (x.key != s.key) continue;
      for (LatencyPoint& p : s.points) {
        if (p.sms != x.sms) continue;
        if (p.count <= x.count) {
          p.count = 0;  // the table was reset or evicted the shape: nothing left to count
          continue;
        }
        const double sum = p.mean_ns * static_cast<double>(p.count) - x.sum_ns;
        p.count -= x.count;
        p.mean_ns = std::max(0.0, sum / static_cast<double>(p.count));
      }
    }
    std::erase_if(s.points, [](const LatencyPoint& p) { return p.count == 0; });
  }
  return out;
}

std::vector<SizerState::SampleSum> samples_at(const std::vector<ShapeSamples>& shapes, uint32_t sms) {
  std::vector<SizerState::SampleSum> out;
  for (const ShapeSamples& s : shapes) {
    const LatencyPoint* p = point_at(s, sms);
    if (p != nullptr) out.push_back({s.key, sms, p->count, p->mean_ns * static_cast<double>(p->count)});
  }
  return out;
}

namespace {

// Shape `key`'s samples at the current size when the sizer moved there (none: it had none).
SizerState::SampleSum at_move_of(const SizerState& state, uint64_t key, uint32_t current) {
  for (const SizerState::SampleSum& x : state.at_move) {
    if (x.key == key) return x;
  }
  return SizerState::SampleSum{key, current, 0, 0};
}

// The sizer moves to `sms`: what is fresh there is counted from now.
void move_to(SizerDecision* d, uint32_t sms, const std::vector<ShapeSamples>& shapes, SizerState* state) {
  state->sms = sms;
  state->confirm_sms = 0;
  state->at_move = samples_at(shapes, sms);
  d->sms = sms;
}

// The sizer stays at the size d has (the current one), for reason `why`.
SizerDecision stay(SizerDecision d, const char* why, SizerState* state) {
  d.why = why;
  state->sms = d.sms;
  return d;
}

}  // namespace

void end_settle(const std::vector<ShapeSamples>& table, uint32_t current, SizerState* state) {
  const std::vector<ShapeSamples> shapes = counted_samples(table, *state);
  std::erase_if(state->discounted, [&](const SizerState::SampleSum& x) {
    return std::none_of(table.begin(), table.end(), [&](const ShapeSamples& s) { return s.key == x.key; });
  });
  for (const ShapeSamples& s : shapes) {
    const LatencyPoint* p = point_at(s, current);
    const SizerState::SampleSum before = at_move_of(*state, s.key, current);
    if (p == nullptr || p->count <= before.count) continue;
    const uint64_t n = p->count - before.count;
    const double sum = p->mean_ns * static_cast<double>(p->count) - before.sum_ns;
    auto it = std::find_if(state->discounted.begin(), state->discounted.end(),
                           [&](const SizerState::SampleSum& x) { return x.key == s.key && x.sms == current; });
    if (it == state->discounted.end()) it = state->discounted.insert(state->discounted.end(), {s.key, current, 0, 0});
    it->count += n;
    it->sum_ns += sum;
  }
  state->settle_until_ns = 0;
  state->at_move = samples_at(counted_samples(table, *state), current);
}

bool MainShapes::ready(uint64_t min_samples) const {
  return !shapes.empty() && std::all_of(fresh.begin(), fresh.end(), [&](uint64_t n) { return n >= min_samples; });
}

MainShapes main_shapes(const std::vector<ShapeSamples>& shapes, const SizerState& state, uint32_t current,
                       double main_share) {
  // What the tenant runs now: the samples taken at the current size since the sizer moved to it
  // (shapes it no longer launches, e.g. a warm-up's, have none and do not hold it up).
  // A shape's share is of that time (samples x mean), not of the launches: one long kernel among
  // many short ones can be most of what the tenant waits for.
  std::vector<uint64_t> fresh(shapes.size(), 0);
  std::vector<double> fresh_ns(shapes.size(), 0);
  double total_ns = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const uint64_t before = at_move_of(state, shapes[i].key, current).count;
    const uint64_t now_count = count_at(shapes[i], current);
    fresh[i] = now_count > before ? now_count - before : 0;
    if (fresh[i] != 0) fresh_ns[i] = static_cast<double>(fresh[i]) * point_at(shapes[i], current)->mean_ns;
    total_ns += fresh_ns[i];
  }
  MainShapes main;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (fresh[i] != 0 && fresh_ns[i] >= main_share * total_ns) {
      main.shapes.push_back(&shapes[i]);
      main.fresh.push_back(fresh[i]);
    }
  }
  return main;
}

void forget_ceiling_figures(const std::vector<ShapeSamples>& shapes, SizerState* state) {
  std::erase_if(state->ceiling_figures, [&](const SizerState::SampleSum& x) {
    return std::none_of(shapes.begin(), shapes.end(), [&](const ShapeSamples& s) { return s.key == x.key; });
  });
}

double ceiling_figure(const ShapeSamples& s, uint32_t ceiling, uint64_t min_samples, SizerState* state) {
  auto it = std::find_if(state->ceiling_figures.begin(), state->ceiling_figures.end(),
                         [&](const SizerState::SampleSum& x) { return x.key == s.key; });
  const LatencyPoint* p = point_at(s, ceiling);
  if (p != nullptr && p->count >= min_samples && (it == state->ceiling_figures.end() || p->count >= it->count)) {
    const SizerState::SampleSum now{s.key, ceiling, p->count, p->mean_ns * static_cast<double>(p->count)};
    if (it == state->ceiling_figures.end()) {
      state->ceiling_figures.push_back(now);
    } else {
      *it = now;
    }
    return p->mean_ns;
  }
  return it != state->ceiling_figures.end() ? it->sum_ns / static_cast<double>(it->count) : 0;
}

Reading read_main_shapes(const MainShapes& main, uint32_t current, uint32_t ceiling, const SizerParams& params,
                         SizerState* state) {
  Reading r;
  for (std::size_t i = 0; i < main.shapes.size(); ++i) {
    const ShapeSamples* s = main.shapes[i];
    const LatencyModel m = fit_latency(s->points, params.min_samples);
    r.single_point = r.single_point || !m.fitted;
    r.models.push_back(m);
    const double w = static_cast<double>(main.fresh[i]);
    r.weight_sum += w;
    const double at_ceiling = ceiling_figure(*s, ceiling, params.min_samples, state);
    const double here = point_at(*s, current)->mean_ns;
    if (at_ceiling > 0) {
      r.ref += w * at_ceiling;
    } else if (m.fitted) {
      r.ref += w * m.at(ceiling);
    } else {
      // First seen below the ceiling (it began after a move): nothing says what the SMs above buy
      // it, so it counts as on par here; the probe one size down gives its model a second point.
      r.ref += w * here;
    }
    r.measured += w * here;
  }
  return r;
}

bool over_limit(const Reading& r, uint32_t current, const SizerParams& params, const SizerState& state,
                uint64_t now_ns) {
  const double limit = 1.0 + params.slack;
  // The size a move up returned to passed before: hold it against all but a clear regression.
  const bool returned = current == state.floor_sms && now_ns < state.floor_until_ns;
  const double up_limit = returned ? std::max(limit, 1.0 + params.settled_slack) : limit;
  return r.measured > up_limit * r.ref;
}

uint64_t floor_hold_ns(const SizerParams& params, uint32_t proofs) {
  uint64_t hold = params.hold_ns;
  for (uint32_t i = 0; i < proofs && hold < params.max_hold_ns; ++i) hold *= 2;
  return std::min(hold, std::max(params.max_hold_ns, params.hold_ns));
}

SizerDecision step_up(SizerDecision d, uint32_t up, const Reading& r, const std::vector<ShapeSamples>& shapes,
                      const SizerParams& params, SizerState* state, uint64_t now_ns) {
  const uint32_t current = d.sms;
  if (r.measured <= (1.0 + params.settled_slack) * r.ref && state->confirm_sms != current) {
    // A small excess from one batch may be noise, and a move up costs a floor of hold_ns: the
    // samples so far are left out (as after a settle) and the next batch decides.
    state->confirm_sms = current;
    state->settle_until_ns = std::max<uint64_t>(now_ns, 1);  // ends at the next call
    return stay(d, "confirm", state);
  }
  state->confirm_sms = 0;
  // The same floor proved again (its hold had expired, or it was never left): hold it longer.
  state->floor_proofs = state->floor_sms == up ? state->floor_proofs + 1 : 0;
  const uint64_t hold = floor_hold_ns(params, state->floor_proofs);
  state->floor_sms = up;
  state->floor_until_ns = now_ns + hold;
  move_to(&d, up, shapes, state);
  state->settle_until_ns = params.settle_ns != 0 ? now_ns + params.settle_ns : 0;
  d.why = "up";
  d.hold_ns = hold;
  return d;
}

uint32_t grid_held(const MainShapes& main, uint32_t current, uint32_t down) {
  for (const ShapeSamples* s : main.shapes) {
    if (s->blocks != 0 && s->blocks <= current && down < s->blocks) return s->blocks;
  }
  return 0;
}

SizerDecision step_down(SizerDecision d, const std::vector<uint32_t>& sizes, std::size_t pos, const MainShapes& main,
                        const Reading& r, const std::vector<ShapeSamples>& shapes, const SizerParams& params,
                        SizerState* state, uint64_t now_ns) {
  const uint32_t floor = now_ns < state->floor_until_ns ? state->floor_sms : 0;
  if (pos == 0 || sizes[pos - 1] < floor) return stay(d, "hold", state);
  const uint32_t down = sizes[pos - 1];
  if (!params.below_grid) {
    d.grid_blocks = grid_held(main, sizes[pos], down);
    if (d.grid_blocks != 0) return stay(d, "grid", state);
  }
  double predicted = 0;
  for (std::size_t i = 0; i < main.shapes.size(); ++i) predicted += static_cast<double>(main.fresh[i]) * r.models[i].at(down);
  if (predicted <= (1.0 + params.slack) * r.ref) {
    d.predicted = predicted / r.ref;
    move_to(&d, down, shapes, state);
    d.why = "down";
    return d;
  }
  if (r.single_point) {  // the model needs a second size: try one size less
    move_to(&d, down, shapes, state);
    d.why = "probe";
    return d;
  }
  return stay(d, "hold", state);
}

SizerDecision right_size(const std::vector<ShapeSamples>& table, const std::vector<uint32_t>& sizes,
                         uint32_t ceiling, const SizerParams& params, SizerState* state, uint64_t now_ns) {
  SizerDecision d;
  if (sizes.empty()) return d;
  ceiling = size_at_or_below(sizes, ceiling);
  const uint32_t current = current_size(sizes, ceiling, state->sms);
  d.sms = current;
  if (state->settle_until_ns != 0 && now_ns < state->settle_until_ns) return stay(d, "settle", state);
  if (state->settle_until_ns != 0) end_settle(table, current, state);
  const std::vector<ShapeSamples> shapes = counted_samples(table, *state);
  // Every main shape needs min_samples fresh samples at the current size.
  const MainShapes main = main_shapes(shapes, *state, current, params.main_share);
  if (!main.ready(params.min_samples)) return stay(d, "wait", state);
  forget_ceiling_figures(shapes, state);
  const Reading r = read_main_shapes(main, current, ceiling, params, state);
  if (r.ref <= 0) return stay(d, "wait", state);
  d.predicted = r.measured / r.ref;
  d.measured = r.measured / r.ref;
  d.ref_ns = r.ref / r.weight_sum;
  const auto pos = static_cast<std::size_t>(std::find(sizes.begin(), sizes.end(), current) - sizes.begin());
  if (over_limit(r, current, params, *state, now_ns) && current < ceiling) {
    return step_up(d, sizes[pos + 1], r, shapes, params, state, now_ns);
  }
  return step_down(d, sizes, pos, main, r, shapes, params, state, now_ns);
}

double partition_cost(const std::vector<ShapeSamples>& shapes, uint32_t ceiling, uint32_t whole, uint64_t min_samples) {
  double confined = 0, alone = 0;
  for (const ShapeSamples& s : shapes) {
    const LatencyPoint* c = point_at(s, ceiling);
    const LatencyPoint* w = point_at(s, whole);
    if (c == nullptr || w == nullptr || c->count < min_samples || w->count < min_samples) continue;
    confined += static_cast<double>(c->count) * c->mean_ns;
    alone += static_cast<double>(c->count) * w->mean_ns;
  }
  return alone > 0 ? confined / alone : 0;
}

uint64_t longest_kernel_ns(const std::vector<ShapeSamples>& shapes) {
  double longest = 0;
  for (const ShapeSamples& s : shapes) {
    const LatencyPoint* widest = nullptr;
    for (const LatencyPoint& p : s.points) {
      if (p.count != 0 && (widest == nullptr || p.sms > widest->sms)) widest = &p;
    }
    if (widest != nullptr) longest = std::max(longest, widest->mean_ns);
  }
  return static_cast<uint64_t>(longest);
}

}  // namespace gpuos::policies::partition
