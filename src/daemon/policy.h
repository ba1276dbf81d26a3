// Scheduling policy interface of gpuosd: mechanism (tenant table, control blocks, gates) lives in
// the core; a policy only decides. A policy is a small class of optional hooks.
//
// Context of every hook: called by the daemon's single event-loop thread (the same thread that runs
// Core::handle_message), with no lock held (the core is single-threaded; nothing else touches the
// tenant table). Hooks must not block and must not throw; they may call GateControl::set_gate,
// which takes effect at once (store + FUTEX_WAKE). Hook inputs travel in structs so hooks can gain
// inputs without a signature change.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "gpuos/abi.h"

namespace gpuos::daemon {

// What a policy sees of a tenant. Valid only for the duration of the hook call.
struct TenantView {
  uint32_t id = 0;
  pid_t pid = 0;
  uid_t uid = 0;
  std::string_view name;
  uint32_t tenant_class = 0;  // requested class in on_register, granted class elsewhere
  int32_t priority = 0;
  uint32_t weight = 0;
  uint64_t requested_mem_bytes = 0;
};

// The decision of on_register. The core pre-fills it with "admit as requested, gate open, quota =
// requested_mem_bytes"; the policy edits it. A policy may lower the class, never raise it (the core
// clamps: a policy answering GUARANTEED for a BEST_EFFORT request is ignored).
struct Admission {
  gpuos_status status = GPUOS_OK;  // anything else refuses the registration with `reason`
  uint32_t granted_class = 0;
  uint64_t mem_quota_bytes = 0;    // 0 = unlimited
  uint32_t initial_gate = GPUOS_GATE_OPEN;
  std::string reason;
};

// Handed to hooks so a policy can change gates without seeing the core.
class GateControl {
 public:
  virtual ~GateControl() = default;
  // Sets a live tenant's gate word (release store), bumps grant_epoch, FUTEX_WAKEs waiters.
  // Returns GPUOS_ERR_NOT_FOUND for an unknown/exited tenant, GPUOS_ERR_BAD_MESSAGE for a bad value.
  virtual gpuos_status set_gate(uint32_t tenant_id, uint32_t gate) = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char* name() const = 0;
  // REGISTER passed validation; the tenant has no id-visible state yet (view.id is the id it will
  // get). Optional: the default admits as pre-filled.
  virtual void on_register(const TenantView& view, Admission* admission) {}
  // The tenant is live: its control block exists and the reply is queued. Optional.
  virtual void on_admitted(const TenantView& view, GateControl& gates) {}
  // The tenant exited (socket EOF or pidfd); it is already out of the live table. Optional.
  virtual void on_exit(const TenantView& view, GateControl& gates) {}
  // Periodic, every ServerOptions::tick_ms (and not at all in pure message-handling use). Optional.
  virtual void tick(uint64_t now_mono_ns, GateControl& gates) {}
};

// The built-in "open" policy: admits everything as requested and keeps every gate open (it never
// closes a gate; an admin's SET_GATE stays as set).
std::unique_ptr<Policy> make_open_policy();

}  // namespace gpuos::daemon
