// SPDX-License-Identifier: Apache-2.0
// The policy hooks' stall watchdog, on an injected clock (no thread, no sleeping).
#include "daemon/core/watchdog.h"

#include <gtest/gtest.h>

#include <string>

namespace gpuos::daemon {
namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(Watchdog, ReportsAStalledCallOnceAndAHungOneOnce) {
  uint64_t now = 1000 * kMs;
  int hung = 0;
  std::string hung_what;
  WatchdogOptions o;
  o.stall_ns = 100 * kMs;
  o.hung_ns = 500 * kMs;
  o.mono_ns = [&] { return now; };
  o.on_hung = [&](const char* slot, const char* hook, uint64_t ran) {
    ++hung;
    hung_what = std::string(slot) + "/" + hook + "/" + std::to_string(ran / kMs);
  };
  Watchdog w(o);
  w.check();  // nothing running
  EXPECT_EQ(w.stalls(), 0u);
  {
    Watchdog::Scope s(&w, "space", "decide");
    now += 99 * kMs;
    w.check();
    EXPECT_EQ(w.stalls(), 0u);
    EXPECT_FALSE(s.stalled());
    now += 1 * kMs;
    w.check();
    EXPECT_EQ(w.stalls(), 1u);
    EXPECT_TRUE(s.stalled());
    w.check();
    EXPECT_EQ(w.stalls(), 1u);  // one report per call
    now += 400 * kMs;
    w.check();
    EXPECT_EQ(hung, 1);
    EXPECT_EQ(hung_what, "space/decide/500");
    w.check();
    EXPECT_EQ(hung, 1);
  }
  w.check();  // the call returned: nothing to report
  EXPECT_EQ(w.stalls(), 1u);
  Watchdog::Scope next(&w, "memory", "decide");
  EXPECT_FALSE(next.stalled());  // a new call starts clean
  now += 50 * kMs;
  w.check();
  EXPECT_FALSE(next.stalled());
}

TEST(Watchdog, NoWatchdogMeansNoReports) {
  Watchdog::Scope s(nullptr, "time gate", "decide");
  EXPECT_FALSE(s.stalled());
}

}  // namespace
}  // namespace gpuos::daemon
