// SPDX-License-Identifier: Apache-2.0
// The stall watchdog of the policy hooks. Hooks run on the event loop, which does nothing else
// while one runs: a hook that does not return stalls every gate, swap and partition decision.
// The loop marks each hook call (Scope); a helper thread looks every check period and
//  - after stall_ns, logs the hook as stalled, once, and flags it: when it returns, its slot falls
//    back to the built-in policy (SlotRunner), as after a throw;
//  - after hung_ns, calls on_hung. gpuosd exits there (main.cc): its tenants see the connection
//    close and go on ungoverned (a closed gate opens), and systemd starts a fresh gpuosd, which they
//    register with again. A hung event loop would hold every gated tenant forever.
// Thread-safety: Scope from the loop thread only; the rest is internal.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace gpuos::daemon {

struct WatchdogOptions {
  uint64_t stall_ns = 1'000'000'000;   // a hook running this long is stalled (0: no watchdog)
  uint64_t hung_ns = 30'000'000'000;   // ... and this long, hung: on_hung (0: never)
  uint64_t check_ns = 100'000'000;     // the helper's period
  std::function<uint64_t()> mono_ns;   // null: CLOCK_MONOTONIC
  std::function<void(const char* slot, const char* hook, uint64_t ran_ns)> on_hung;  // null: nothing
};

class Watchdog {
 public:
  explicit Watchdog(WatchdogOptions opts);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  class Scope {
   public:
    Scope(Watchdog* w, const char* slot, const char* hook);  // w may be null: no watch
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    // Whether the watchdog found this call stalled (valid once the hook returned).
    bool stalled() const;

   private:
    Watchdog* w_;
  };

  // One check now (the helper's step; tests call it with an injected clock and no thread).
  void check();
  uint64_t stalls() const { return stalls_.load(std::memory_order_relaxed); }

 private:
  uint64_t now() const;
  void run();

  WatchdogOptions opts_;
  // The call in progress: its names and start (0 = none); written by the loop thread.
  std::atomic<const char*> slot_{nullptr};
  std::atomic<const char*> hook_{nullptr};
  std::atomic<uint64_t> started_ns_{0};
  std::atomic<uint64_t> call_{0};        // counts calls, so a report is about one call only
  std::atomic<uint64_t> stalled_call_{0};
  std::atomic<uint64_t> hung_call_{0};
  std::atomic<uint64_t> stalls_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpuos::daemon
