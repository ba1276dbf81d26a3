// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/watchdog.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "common/clock.h"

namespace gpuos::daemon {

Watchdog::Watchdog(WatchdogOptions opts) : opts_(std::move(opts)) {
  // With an injected clock the test drives check() itself.
  if (opts_.stall_ns != 0 && !opts_.mono_ns) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Watchdog::now() const { return opts_.mono_ns ? opts_.mono_ns() : monotonic_ns(); }

void Watchdog::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::nanoseconds(opts_.check_ns));
    if (stop_) break;
    lk.unlock();
    check();
    lk.lock();
  }
}

void Watchdog::check() {
  const uint64_t call = call_.load(std::memory_order_acquire);
  const uint64_t started = started_ns_.load(std::memory_order_acquire);
  if (started == 0 || opts_.stall_ns == 0) return;
  const char* slot = slot_.load(std::memory_order_relaxed);
  const char* hook = hook_.load(std::memory_order_relaxed);
  const uint64_t t = now();
  const uint64_t ran = t > started ? t - started : 0;
  // Still the same call? (It may have ended and another begun between the loads.)
  if (call_.load(std::memory_order_acquire) != call || slot == nullptr || hook == nullptr) return;
  if (ran >= opts_.stall_ns && stalled_call_.load(std::memory_order_relaxed) != call) {
    stalled_call_.store(call, std::memory_order_release);
    stalls_.fetch_add(1, std::memory_order_relaxed);
    log::error("policy watchdog: the %s slot's %s hook has not returned for %.0f ms; the slot falls back to its "
               "built-in policy once it does", slot, hook, ran / 1e6);
  }
  if (opts_.hung_ns != 0 && ran >= opts_.hung_ns && hung_call_.load(std::memory_order_relaxed) != call) {
    hung_call_.store(call, std::memory_order_release);
    log::error("policy watchdog: the %s slot's %s hook has not returned for %.1f s: gpuosd is hung", slot, hook,
               ran / 1e9);
    if (opts_.on_hung) opts_.on_hung(slot, hook, ran);
  }
}

Watchdog::Scope::Scope(Watchdog* w, const char* slot, const char* hook) : w_(w) {
  if (w_ == nullptr) return;
  w_->slot_.store(slot, std::memory_order_relaxed);
  w_->hook_.store(hook, std::memory_order_relaxed);
  w_->call_.fetch_add(1, std::memory_order_acq_rel);
  w_->started_ns_.store(std::max<uint64_t>(w_->now(), 1), std::memory_order_release);
}

Watchdog::Scope::~Scope() {
  if (w_ == nullptr) return;
  w_->started_ns_.store(0, std::memory_order_release);
}

bool Watchdog::Scope::stalled() const {
  return w_ != nullptr && w_->stalled_call_.load(std::memory_order_acquire) == w_->call_.load(std::memory_order_acquire);
}

}  // namespace gpuos::daemon
