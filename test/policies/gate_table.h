// SPDX-License-Identifier: Apache-2.0
// A time gate's world as the core presents it, over a plain table: views out, actions applied the
// way the core applies them (a pinned gate stays as it is). For the time-gate policies' tests.
#pragma once

#include <map>

#include "slots/time_gate.h"

namespace gpuos::policies::testing {

struct GateTable {
  std::map<uint32_t, slots::GateTenant> live;
  int sets = 0;  // gate words changed by actions
  uint64_t next_tick_ns = 0;
  std::map<uint32_t, slots::Pacing> pacing;  // published with each action, as the core does

  slots::GateTenant& add(uint32_t id, uint32_t cls, int32_t prio = 0, uint32_t weight = 100,
                         uint32_t gate = GPUOS_GATE_OPEN) {
    slots::GateTenant t;
    t.id = id;
    t.tenant_class = cls;
    t.priority = prio;
    t.weight = weight;
    t.gate = gate;
    return live[id] = t;
  }
  slots::GateView view(uint64_t now, slots::Event e, uint32_t id = 0) const {
    slots::GateView v;
    v.now_ns = now;
    v.event = e;
    v.tenant_id = id;
    for (const auto& [i, t] : live) v.tenants.push_back(t);
    return v;
  }
  // decide() of `policy` at `now`, its actions applied.
  template <typename Policy>
  void run(Policy& policy, uint64_t now, slots::Event e = slots::Event::kTick, uint32_t id = 0) {
    const slots::GateActions a = policy.decide(view(now, e, id));
    for (const slots::GateAction& g : a.gates) {
      slots::GateTenant& t = live.at(g.id);
      pacing[g.id] = g.gate == GPUOS_GATE_OPEN ? g.pacing : slots::Pacing{};
      if (t.pinned || t.gate == g.gate) continue;
      t.gate = g.gate;
      ++sets;
    }
    next_tick_ns = a.next_tick_ns;
  }
  uint32_t gate(uint32_t id) const { return live.at(id).gate; }
};

}  // namespace gpuos::policies::testing
