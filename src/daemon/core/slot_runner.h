// SPDX-License-Identifier: Apache-2.0
// Runs one policy slot's hooks for the core: guarded (a throw, a stall or an action the core
// rejects counts as a failure), with the slot's built-in policy taking over at the first failure
// (slot.h). One runner per slot; the core owns them. run_slot asks a slot once through its engine.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "common/log.h"
#include "daemon/core/watchdog.h"
#include "slots/slot.h"

namespace gpuos::daemon {

template <typename Policy>
class SlotRunner {
 public:
  using Builtin = std::function<std::unique_ptr<Policy>()>;
  // slot: "time gate", "space", "memory" (logs, metrics). policy null: the built-in from the start.
  SlotRunner(const char* slot, std::unique_ptr<Policy> policy, Builtin builtin)
      : slot_(slot), builtin_(std::move(builtin)), policy_(policy ? std::move(policy) : builtin_()) {}

  const char* slot() const { return slot_; }
  Policy& policy() { return *policy_; }
  const Policy& policy() const { return *policy_; }
  uint64_t failures() const { return failures_; }
  void set_watchdog(Watchdog* w) { watchdog_ = w; }
  // Called after a fallback, with the new policy in place (the core undoes what the failed policy
  // left in the control blocks, e.g. max_inflight).
  void on_fallback(std::function<void()> fn) { on_fallback_ = std::move(fn); }

  // Runs fn(policy) for hook `hook`. False if it threw or stalled: the slot then runs its built-in
  // policy (already in place when this returns), and fn's output must not be used.
  template <typename F>
  bool run(const char* hook, F&& fn) {
    std::string what;
    bool stalled = false;
    {
      Watchdog::Scope scope(watchdog_, slot_, hook);
      try {
        fn(*policy_);
      } catch (const std::exception& e) {
        what = e.what();
        if (what.empty()) what = "exception";
      } catch (...) {
        what = "unknown exception";
      }
      stalled = scope.stalled();
    }
    if (what.empty() && stalled) what = "stalled (see the watchdog's report)";
    if (what.empty()) return true;
    fail(hook, what);
    return false;
  }

  // A failure found by the core (an action it rejected): counted, logged, fallback.
  void fail(const char* hook, const std::string& why) {
    ++failures_;
    log::error("%s policy \"%s\" failed in %s: %s; the built-in policy takes over (failure %llu)", slot_,
               policy_->name(), hook, why.c_str(), static_cast<unsigned long long>(failures_));
    policy_ = builtin_();
    if (on_fallback_) on_fallback_();
  }

 private:
  const char* slot_;
  Builtin builtin_;
  std::unique_ptr<Policy> policy_;
  uint64_t failures_ = 0;
  Watchdog* watchdog_ = nullptr;
  std::function<void()> on_fallback_;
};

// An engine is a slot's mechanism, one shape for every slot (GateEngine, SpaceEngine, SwapEngine):
//   using Policy, View, Actions;
//   bool make_view(Tenants&, slots::Event, uint32_t tenant_id, uint64_t now, View*);
//                  // false: nothing to decide now (the policy is not asked)
//   bool check(const View&, const Actions&, std::string* why) const;
//                  // the slot's contract; false with the first breach in *why
//   void apply(Tenants&, const View&, const Actions&, uint64_t now);
// run_slot asks the slot's policy with a fresh view and carries out its checked answer. An answer
// that breaks the contract is a failure: the built-in policy is asked in its place at once (its
// answer is trusted: the built-ins are trivially safe), and so after a throw or a stall.
template <typename Engine, typename Tenants>
void run_slot(SlotRunner<typename Engine::Policy>& runner, Engine& engine, Tenants& tenants, slots::Event e,
              uint32_t tenant_id, uint64_t now) {
  using Policy = typename Engine::Policy;
  typename Engine::View view;
  if (!engine.make_view(tenants, e, tenant_id, now, &view)) return;
  typename Engine::Actions actions{};
  bool ok = runner.run("decide", [&](Policy& p) { actions = p.decide(view); });
  if (ok) {
    std::string why;
    ok = engine.check(view, actions, &why);
    if (!ok) runner.fail("decide", "rejected: " + why);
  }
  if (!ok) {
    actions = {};
    runner.run("decide", [&](Policy& p) { actions = p.decide(view); });
  }
  engine.apply(tenants, view, actions, now);
}

}  // namespace gpuos::daemon
