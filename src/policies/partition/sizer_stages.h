// SPDX-License-Identifier: Apache-2.0
// The sizer's decision (right_size, sizer.h), as stages run in this order, each a function of the
// samples, the settings and the sizer's state that it reads or moves:
//   sizes     the ceiling and the current size, as sizes the GPU gives;
//   settle    after a move up, the samples taken while settling left out of every figure;
//   main      the shapes that make most of what the tenant runs now, and whether each has enough
//             fresh samples to judge;
//   read      the tenant's latency at the current size and at the ceiling, from the main shapes;
//   up        a move up (or a confirmation first) when the current size reads over the slack;
//   down      else a move down, a probe, or a hold (a floor, the grid, the model's prediction).
// The rules they make up are sizer.h's; each stage can be asked alone by a test.
#pragma once

#include <cstdint>
#include <vector>

#include "policies/partition/sizer.h"

namespace gpuos::policies::partition {

// --- sizes
// The largest of `sizes` (ascending) at or below `ceiling` (the smallest if none is).
uint32_t size_at_or_below(const std::vector<uint32_t>& sizes, uint32_t ceiling);
// The size the tenant has now: the one chosen last (0: none yet, the ceiling), never above the
// ceiling, and the ceiling when it is not one of `sizes`.
uint32_t current_size(const std::vector<uint32_t>& sizes, uint32_t ceiling, uint32_t chosen);

// --- settle
// The samples the sizer counts: the table's, less those taken while it was settling.
std::vector<ShapeSamples> counted_samples(const std::vector<ShapeSamples>& raw, const SizerState& state);
// Each shape's samples at `sms` (count and sum): what is fresh is counted from these.
std::vector<SizerState::SampleSum> samples_at(const std::vector<ShapeSamples>& shapes, uint32_t sms);
// Settled: what came in at the current size since the move is left out of every figure from now
// on, and the fresh samples are counted from here.
void end_settle(const std::vector<ShapeSamples>& table, uint32_t current, SizerState* state);

// --- main
// The main shapes: those with at least main_share of the fresh GPU time (samples x mean) at the
// current size, with their fresh sample counts (what they weigh).
struct MainShapes {
  std::vector<const ShapeSamples*> shapes;  // into the samples they were picked from
  std::vector<uint64_t> fresh;
  // Every main shape has min_samples fresh samples (and there is one).
  bool ready(uint64_t min_samples) const;
};
MainShapes main_shapes(const std::vector<ShapeSamples>& shapes, const SizerState& state, uint32_t current,
                       double main_share);

// --- read
// Forgets the ceiling figures of shapes no longer in the samples.
void forget_ceiling_figures(const std::vector<ShapeSamples>& shapes, SizerState* state);
// Shape s's figure at the ceiling: the table's once it has min_samples there (kept in
// state->ceiling_figures), else the one kept last (0: none).
double ceiling_figure(const ShapeSamples& s, uint32_t ceiling, uint64_t min_samples, SizerState* state);
// The tenant's latency at the current size (measured) and at the ceiling (ref), each summed over
// the main shapes weighted by their fresh samples, and each main shape's model.
struct Reading {
  double weight_sum = 0;
  double ref = 0;
  double measured = 0;
  bool single_point = false;  // a main shape was seen at one size only: its model is no fit
  std::vector<LatencyModel> models;  // one per main shape
};
Reading read_main_shapes(const MainShapes& main, uint32_t current, uint32_t ceiling, const SizerParams& params,
                         SizerState* state);

// --- up
// Whether the current size reads over its limit: the slack, or, at the size a move up returned
// to while its hold lasts, settled_slack (the figure it is held against was measured once).
bool over_limit(const Reading& r, uint32_t current, const SizerParams& params, const SizerState& state,
                uint64_t now_ns);
// How long a floor proved `proofs` times in a row more holds: hold_ns, doubled each time, at most
// max_hold_ns (or hold_ns, if that is more).
uint64_t floor_hold_ns(const SizerParams& params, uint32_t proofs);
// From d (at the current size): a confirmation first when the excess is small, else a move to `up`.
SizerDecision step_up(SizerDecision d, uint32_t up, const Reading& r, const std::vector<ShapeSamples>& shapes,
                      const SizerParams& params, SizerState* state, uint64_t now_ns);

// --- down
// The block count of the first main shape whose grid runs one block per SM at `current` and
// would not at `down` (0: none).
uint32_t grid_held(const MainShapes& main, uint32_t current, uint32_t down);
// From d (at sizes[pos]): down one size when the model allows, a probe while it cannot tell, else
// a hold.
SizerDecision step_down(SizerDecision d, const std::vector<uint32_t>& sizes, std::size_t pos, const MainShapes& main,
                        const Reading& r, const std::vector<ShapeSamples>& shapes, const SizerParams& params,
                        SizerState* state, uint64_t now_ns);

}  // namespace gpuos::policies::partition
