// SPDX-License-Identifier: Apache-2.0
#include "policies/partition/sizer.h"

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

namespace {

// The samples the sizer counts: the table's, less those taken while it was settling.
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

}  // namespace

SizerDecision right_size(const std::vector<ShapeSamples>& table, const std::vector<uint32_t>& sizes,
                         uint32_t ceiling, const SizerParams& params, SizerState* state, uint64_t now_ns) {
  SizerDecision d;
  if (sizes.empty()) return d;
  if (std::find(sizes.begin(), sizes.end(), ceiling) == sizes.end()) {
    // Not a size the GPU gives: the largest below it.
    auto it = std::upper_bound(sizes.begin(), sizes.end(), ceiling);
    ceiling = it == sizes.begin() ? sizes.front() : *(it - 1);
  }
  uint32_t current = state->sms == 0 ? ceiling : std::min(state->sms, ceiling);
  if (std::find(sizes.begin(), sizes.end(), current) == sizes.end()) current = ceiling;
  d.sms = current;
  if (state->settle_until_ns != 0 && now_ns < state->settle_until_ns) {
    d.why = "settle";
    state->sms = current;
    return d;
  }
  std::vector<ShapeSamples> shapes = counted_samples(table, *state);
  const auto snapshot_of = [&](uint64_t key) {
    for (const SizerState::SampleSum& x : state->at_move) {
      if (x.key == key) return x;
    }
    return SizerState::SampleSum{key, current, 0, 0};
  };
  if (state->settle_until_ns != 0) {
    // Settled: what came in since the move is left out of every figure from now on.
    std::erase_if(state->discounted, [&](const SizerState::SampleSum& x) {
      return std::none_of(table.begin(), table.end(), [&](const ShapeSamples& s) { return s.key == x.key; });
    });
    for (const ShapeSamples& s : shapes) {
      const LatencyPoint* p = point_at(s, current);
      const SizerState::SampleSum before = snapshot_of(s.key);
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
    shapes = counted_samples(table, *state);
    state->at_move.clear();
    for (const ShapeSamples& s : shapes) {
      const LatencyPoint* p = point_at(s, current);
      if (p != nullptr) state->at_move.push_back({s.key, current, p->count, p->mean_ns * static_cast<double>(p->count)});
    }
  }
  const auto moved_to = [&](uint32_t sms) {
    state->sms = sms;
    state->confirm_sms = 0;
    state->at_move.clear();
    for (const ShapeSamples& s : shapes) {
      const LatencyPoint* p = point_at(s, sms);
      if (p != nullptr) state->at_move.push_back({s.key, sms, p->count, p->mean_ns * static_cast<double>(p->count)});
    }
    d.sms = sms;
  };

  // What the tenant runs now: the samples taken at the current size since the sizer moved to it
  // (shapes it no longer launches, e.g. a warm-up's, have none and do not hold it up).
  // A shape's share is of that time (samples x mean), not of the launches: one long kernel among
  // many short ones can be most of what the tenant waits for.
  std::vector<uint64_t> fresh(shapes.size(), 0);
  std::vector<double> fresh_ns(shapes.size(), 0);
  double total_ns = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const uint64_t before = snapshot_of(shapes[i].key).count;
    const uint64_t now_count = count_at(shapes[i], current);
    fresh[i] = now_count > before ? now_count - before : 0;
    if (fresh[i] != 0) fresh_ns[i] = static_cast<double>(fresh[i]) * point_at(shapes[i], current)->mean_ns;
    total_ns += fresh_ns[i];
  }
  std::vector<const ShapeSamples*> main;
  std::vector<uint64_t> weight;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (fresh[i] != 0 && fresh_ns[i] >= params.main_share * total_ns) {
      main.push_back(&shapes[i]);
      weight.push_back(fresh[i]);
    }
  }
  // Every main shape needs min_samples fresh samples at the current size.
  bool ready = !main.empty();
  for (uint64_t w : weight) ready = ready && w >= params.min_samples;
  if (!ready) {
    d.why = "wait";
    state->sms = current;
    return d;
  }
  // Each shape's figure at the ceiling: the table's, else the one it had last.
  std::erase_if(state->ceiling_figures, [&](const SizerState::SampleSum& x) {
    return std::none_of(shapes.begin(), shapes.end(), [&](const ShapeSamples& s) { return s.key == x.key; });
  });
  const auto ceiling_figure = [&](const ShapeSamples& s) -> double {
    auto it = std::find_if(state->ceiling_figures.begin(), state->ceiling_figures.end(),
                           [&](const SizerState::SampleSum& x) { return x.key == s.key; });
    const LatencyPoint* p = point_at(s, ceiling);
    if (p != nullptr && p->count >= params.min_samples && (it == state->ceiling_figures.end() || p->count >= it->count)) {
      const SizerState::SampleSum now{s.key, ceiling, p->count, p->mean_ns * static_cast<double>(p->count)};
      if (it == state->ceiling_figures.end()) {
        state->ceiling_figures.push_back(now);
      } else {
        *it = now;
      }
      return p->mean_ns;
    }
    return it != state->ceiling_figures.end() ? it->sum_ns / static_cast<double>(it->count) : 0;
  };
  double weight_sum = 0, ref = 0, measured = 0;
  bool single_point = false;
  std::vector<LatencyModel> models;
  for (std::size_t i = 0; i < main.size(); ++i) {
    const ShapeSamples* s = main[i];
    const LatencyModel m = fit_latency(s->points, params.min_samples);
    single_point = single_point || !m.fitted;
    models.push_back(m);
    const double w = static_cast<double>(weight[i]);
    weight_sum += w;
    const double at_ceiling = ceiling_figure(*s);
    const double here = point_at(*s, current)->mean_ns;
    if (at_ceiling > 0) {
      ref += w * at_ceiling;
    } else if (m.fitted) {
      ref += w * m.at(ceiling);
    } else {
      // First seen below the ceiling (it began after a move): nothing says what the SMs above buy
      // it, so it counts as on par here; the probe one size down gives its model a second point.
      ref += w * here;
    }
    measured += w * here;
  }
  if (ref <= 0) {
    d.why = "wait";
    state->sms = current;
    return d;
  }
  const double limit = 1.0 + params.slack;
  d.predicted = measured / ref;
  d.measured = measured / ref;
  d.ref_ns = ref / weight_sum;
  const auto pos = std::find(sizes.begin(), sizes.end(), current) - sizes.begin();
  // The size a move up returned to passed before: hold it against all but a clear regression.
  const bool returned = current == state->floor_sms && now_ns < state->floor_until_ns;
  const double up_limit = returned ? std::max(limit, 1.0 + params.settled_slack) : limit;
  if (measured > up_limit * ref && current < ceiling) {
    if (measured <= (1.0 + params.settled_slack) * ref && state->confirm_sms != current) {
      // A small excess from one batch may be noise, and a move up costs a floor of hold_ns: the
      // samples so far are left out (as after a settle) and the next batch decides.
      state->confirm_sms = current;
      state->settle_until_ns = std::max<uint64_t>(now_ns, 1);  // ends at the next call
      state->sms = current;
      d.why = "confirm";
      return d;
    }
    state->confirm_sms = 0;
    const uint32_t up = sizes[pos + 1];
    // The same floor proved again (its hold had expired, or it was never left): hold it longer.
    state->floor_proofs = state->floor_sms == up ? state->floor_proofs + 1 : 0;
    uint64_t hold = params.hold_ns;
    for (uint32_t i = 0; i < state->floor_proofs && hold < params.max_hold_ns; ++i) hold *= 2;
    hold = std::min(hold, std::max(params.max_hold_ns, params.hold_ns));
    state->floor_sms = up;
    state->floor_until_ns = now_ns + hold;
    moved_to(up);
    state->settle_until_ns = params.settle_ns != 0 ? now_ns + params.settle_ns : 0;
    d.why = "up";
    d.hold_ns = hold;
    return d;
  }
  const uint32_t floor = now_ns < state->floor_until_ns ? state->floor_sms : 0;
  if (pos == 0 || sizes[pos - 1] < floor) {
    d.why = "hold";
    state->sms = current;
    return d;
  }
  const uint32_t down = sizes[pos - 1];
  if (!params.below_grid) {
    for (const ShapeSamples* s : main) {
      if (s->blocks != 0 && s->blocks <= current && down < s->blocks) {
        d.why = "grid";
        d.grid_blocks = s->blocks;
        state->sms = current;
        return d;
      }
    }
  }
  double predicted = 0;
  for (std::size_t i = 0; i < main.size(); ++i) predicted += static_cast<double>(weight[i]) * models[i].at(down);
  if (predicted <= limit * ref) {
    d.predicted = predicted / ref;
    moved_to(down);
    d.why = "down";
    return d;
  }
  if (single_point) {  // the model needs a second size: try one size less
    moved_to(down);
    d.why = "probe";
    return d;
  }
  d.why = "hold";
  state->sms = current;
  return d;
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
