// Runs one policy slot's hooks for the core: guarded (a throw, a stall or an action the core
// rejects counts as a failure), with the slot's built-in policy taking over at the first failure
// (slot.h). One runner per slot; the core owns them.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "common/log.h"
#include "daemon/watchdog.h"

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

}  // namespace gpuos::daemon
