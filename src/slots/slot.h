// SPDX-License-Identifier: Apache-2.0
// The policy slots of gpuosd: the one shape every scheduling decision takes.
//
// gpuosd's core (src/daemon) is mechanism only: tenants, messages, control blocks, gates, memory
// maps, swap commands and SM masks. Every decision comes from a policy in one of three slots, in
// the spirit of Linux's sched_class and sched_ext (one hook table; the kernel keeps the mechanism,
// the class decides, and a failing sched_ext scheduler falls back to the built-in one):
//
//   slot        decides                              view in       actions out      built-in fallback
//   time gate   who may launch now (gates), and how  GateView      GateActions      "open"
//               a tenant is admitted (time_gate.h)
//   space       which SMs each spatial tenant gets   SpaceView     SpaceActions     "unconfined"
//               (partitions, right-sizing; space.h)
//   memory      who swaps out or in, who gets room   MemoryView    MemoryActions    "resident"
//               for an allocation (memory.h)
//
// Every slot has the hook table of Slot<View, Actions>:
//   name()            the policy's name (as in the config);
//   on_admitted(id)   a tenant is live: create its per-tenant state (optional);
//   on_exit(id)       it is gone: drop that state (optional);
//   decide(view)      the world as it is now in, what to do out.
// The core builds a fresh view at each event (registration, exit, ACTIVITY, an admin's command, a
// tick) and carries out the actions, checking each one (an action for an unknown tenant, or one
// that breaks the slot's contract, counts as a failure). A policy owns its per-tenant state (keyed
// by tenant id) and sees no control block, socket or file: only views.
//
// Context of every hook: the daemon's single event-loop thread, no lock held. Hooks must not
// block. A hook that throws, or returns actions the core rejects, makes the core count a failure,
// log it and run the slot's built-in policy for the rest of the daemon's life. A hook that does not
// return within the watchdog's bound (daemon/watchdog.h) is reported while it runs, and the slot
// falls back as soon as it returns.
#pragma once

#include <cstdint>

namespace gpuos::slots {

// What made the core ask (for logs and for policies that care).
enum class Event : uint8_t {
  kAdmitted,   // a tenant registered (view.tenant_id)
  kExit,       // a tenant exited (view.tenant_id; it is no longer in the view)
  kActivity,   // a tenant's busy / waiting words may have changed (view.tenant_id)
  kAdmin,      // an admin released a tenant's pin (view.tenant_id)
  kTick,       // periodic, or the time a policy asked for
};
const char* event_name(Event e);

template <typename View, typename Actions>
class Slot {
 public:
  using ViewType = View;
  using ActionsType = Actions;
  virtual ~Slot() = default;
  virtual const char* name() const = 0;
  virtual void on_admitted(uint32_t tenant_id) {}
  virtual void on_exit(uint32_t tenant_id) {}
  virtual Actions decide(const View& view) = 0;
};

}  // namespace gpuos::slots
