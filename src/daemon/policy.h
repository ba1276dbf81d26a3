// Scheduling policy interface of gpuosd: mechanism (tenant table, control blocks, gates, clocks,
// timers) lives in the core; a policy only decides. A policy is a small class of optional hooks.
//
// Context of every hook: called by the daemon's single event-loop thread (the same thread that runs
// Core::handle_message), with no lock held (the core is single-threaded; nothing else touches the
// tenant table). Hooks must not block. They should not throw: if one does, the core catches it,
// logs it, counts it (Core::policy_failures), and replaces the policy with the built-in `open`
// policy for the rest of the daemon's life (every gate not pinned by an admin is opened and
// max_inflight is reset to 0 in every live control block). Hooks may call GateControl::set_gate,
// which takes effect at once (store + FUTEX_WAKE). Hook inputs travel in structs so hooks can gain
// inputs without a signature change.
//
// Admin override: an admin's SET_GATE to CLOSED pins that tenant's gate ("pinned"); while pinned,
// set_gate from a policy leaves the gate alone (returns GPUOS_ERR_REFUSED). An admin's SET_GATE to
// OPEN releases the pin, opens the gate and lets the policy decide again at once (on_activity).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "gpuos/abi.h"

namespace gpuos::daemon {

// What a policy sees of a tenant. Valid only for the duration of the hook call (or of the
// for_each_tenant callback). busy/waiting/gate are read (atomics) from the control block when the
// view is made; in on_register there is no control block yet and they are false/false/OPEN.
struct TenantView {
  uint32_t id = 0;
  pid_t pid = 0;
  uid_t uid = 0;
  std::string_view name;
  std::string_view space_domain;  // spatial-sharing domain ("" = none): its tenants share in space
  uint32_t tenant_class = 0;  // requested class in on_register, granted class elsewhere
  int32_t priority = 0;
  uint32_t weight = 0;
  uint64_t requested_mem_bytes = 0;
  bool busy = false;     // control block `busy`: submitted work not finished (or within idle grace)
  bool waiting = false;  // control block `waiting`: a thread is blocked at the closed gate
  bool signalled = false;  // control block `signalled`: a signal handler woke a thread blocked in gpuos
  uint32_t gate = GPUOS_GATE_OPEN;  // current gate word
  bool pinned = false;   // an admin closed this gate; set_gate from a policy is ignored
};

// The decision of on_register. The core pre-fills it with "admit as requested, gate open, quota =
// requested_mem_bytes, borrow = requested_borrow_bytes, max_inflight 0, idle_grace_us 0"; the
// policy edits it. A policy may lower
// the class, never raise it (the core clamps: a policy answering GUARANTEED for a BEST_EFFORT
// request is ignored). The core writes gate, quota, max_inflight and idle_grace_us into the control
// block before the tenant gets its fd.
struct Admission {
  gpuos_status status = GPUOS_OK;  // anything else refuses the registration with `reason`
  uint32_t granted_class = 0;
  uint64_t mem_quota_bytes = 0;    // 0 = unlimited
  uint64_t mem_borrow_bytes = 0;   // with a quota: more it may hold while the GPU has room
  uint32_t initial_gate = GPUOS_GATE_OPEN;
  uint32_t max_inflight = 0;       // >0: the tenant keeps at most this many launches unfinished
  uint32_t idle_grace_us = 0;      // the tenant reports idle only after this long without work
  std::string reason;
};

// Handed to hooks so a policy can see and change gates without seeing the core.
class GateControl {
 public:
  virtual ~GateControl() = default;
  // Sets a live tenant's gate word (release store), bumps grant_epoch, FUTEX_WAKEs waiters; a
  // store of the value already there does nothing. Returns GPUOS_ERR_NOT_FOUND for an
  // unknown/exited tenant, GPUOS_ERR_BAD_MESSAGE for a bad value, GPUOS_ERR_REFUSED (nothing
  // changed) for a tenant an admin pinned.
  virtual gpuos_status set_gate(uint32_t tenant_id, uint32_t gate) = 0;
  // Calls fn for every live tenant in id order, with a fresh view. fn must not register or remove
  // tenants (it may call set_gate).
  virtual void for_each_tenant(const std::function<void(const TenantView&)>& fn) = 0;
  // The core's monotonic clock (CLOCK_MONOTONIC ns, injectable in tests).
  virtual uint64_t now_mono_ns() = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char* name() const = 0;
  // REGISTER passed validation; the tenant has no id-visible state yet (view.id is the id it will
  // get; for_each_tenant cannot be used here). Optional: the default admits as pre-filled.
  virtual void on_register(const TenantView& view, Admission* admission) {}
  // The tenant is live: its control block exists and the reply is queued but not yet sent (a gate
  // set here is in place before the tenant can launch anything). Optional.
  virtual void on_admitted(const TenantView& view, GateControl& gates) {}
  // The tenant exited (socket EOF or pidfd); it is already out of the live table (for_each_tenant
  // no longer shows it). Optional.
  virtual void on_exit(const TenantView& view, GateControl& gates) {}
  // The tenant's busy/waiting words may have changed: it sent ACTIVITY (the words in `view` are the
  // authoritative control-block values, not the message's echo), or an admin released its pin.
  // Optional.
  virtual void on_activity(const TenantView& view, GateControl& gates, uint64_t now_mono_ns) {}
  // Periodic: every ServerOptions::tick_ms while at least one tenant is live, and at the time
  // next_tick_ns asked for. Not called at all in pure message-handling use. Optional.
  virtual void tick(uint64_t now_mono_ns, GateControl& gates) {}
  // When the policy needs its next tick (absolute CLOCK_MONOTONIC ns), e.g. the end of a time
  // slice; 0 = no particular time (the regular tick_ms period is enough). Asked after every event
  // the loop handled; must be cheap. Optional.
  virtual uint64_t next_tick_ns(uint64_t now_mono_ns) { return 0; }
};

// The built-in "open" policy: admits everything as requested and keeps every gate open (it never
// closes a gate; an admin's SET_GATE stays as set).
std::unique_ptr<Policy> make_open_policy();

}  // namespace gpuos::daemon
