// SPDX-License-Identifier: Apache-2.0
// gpuos demo's verdict against its numbers: "as fast as alone" only within 1.1x at the median and
// p99 (issue #40: 1.5x had been called near alone); the mechanism named; a miss on a machine
// measured busy or noisy is "cannot tell" with the load it measured, never a guess (issue #57).
// And the parsers of /proc that measure the machine (cli/machine_load.h).
#include <gtest/gtest.h>

#include "cli/demo_verdict.h"
#include "cli/machine_load.h"

namespace gpuos::cli {
namespace {

DemoNumbers numbers(double p50, double p99) {
  DemoNumbers n;
  n.sharing = "space";
  n.policy = "priority";
  n.p50_ratio = p50;
  n.p99_ratio = p99;
  n.be_vs_alone = 0.94;
  n.hp_idle_share = 0.8;
  return n;
}

// A machine measured quiet: hardly any other CPU use, hp alone twice within 2%.
DemoNumbers quiet(DemoNumbers n) {
  n.cpus = 2;
  n.other_cpus = 0.05;
  n.loadavg = 0.12;
  n.again_p50_ratio = 1.01;
  n.again_p99_ratio = 0.98;
  return n;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(DemoVerdict, AsFastAsAloneOnlyWithinTenPercent) {
  EXPECT_TRUE(has(demo_verdict(numbers(1.01, 1.04)), "within 10% of its latency alone, median and tail"));
  EXPECT_TRUE(has(demo_verdict(numbers(1.05, 1.5)), "median within 10% of alone, not its tail"));
  const std::string slow = demo_verdict(numbers(1.44, 5.1));
  EXPECT_TRUE(has(slow, "did not keep hp near its latency alone, more than 10% slower")) << slow;
  EXPECT_FALSE(has(slow, "within 10%")) << slow;
  EXPECT_TRUE(has(slow, "be ran at 94% of its speed alone (hp alone leaves 80%")) << slow;
  EXPECT_EQ(demo_verdict(numbers(0, 0)).rfind("no verdict", 0), 0u);
}

// The mechanism that shared the GPU is named: SM partitions (and whose: MPS's on a GPU, the
// double's on the simulated device) or the time gate.
TEST(DemoVerdict, NamesTheMechanism) {
  DemoNumbers sim = quiet(numbers(1.01, 1.04));
  sim.simulated = true;
  sim.hp_sms = 32;
  sim.device_sms = 132;
  const std::string s = demo_verdict(sim);
  EXPECT_TRUE(has(s, "with SM partitions in one spatial domain (hp on 32 SMs of its own, be on the other 100; the "
                     "simulated device runs kernels of disjoint partitions side by side, as MPS does on a GPU)"))
      << s;
  DemoNumbers gpu = sim;
  gpu.simulated = false;
  EXPECT_TRUE(has(demo_verdict(gpu), "be on the other 100; MPS)"));
  DemoNumbers time = quiet(numbers(1.05, 3.0));
  time.sharing = "time";
  const std::string t = demo_verdict(time);
  EXPECT_TRUE(has(t, "with time sharing (be's launches gated while hp works)")) << t;
  EXPECT_TRUE(has(t, "no preemption")) << t;
}

// The verdict always names the load it measured, whatever it concludes.
TEST(DemoVerdict, NamesTheMeasuredLoad) {
  const std::string kept = demo_verdict(quiet(numbers(1.01, 1.04)));
  EXPECT_TRUE(has(kept, "within 10% of its latency alone, median and tail")) << kept;
  EXPECT_TRUE(has(kept, "; machine: other processes kept 0.05 of the demo's 2 CPUs busy while hp ran (below 0.50 lets it tell), "
                        "load average 0.12, hp alone measured twice came out 1.01x apart at the median and 1.02x at p99 "
                        "(within 1.10x lets it tell)"))
      << kept;
  EXPECT_FALSE(has(kept, "to show a 10% difference for sure")) << kept;
  // Kept on a busy machine is still kept (no difference showed), with the load named and what it
  // may have hidden.
  DemoNumbers busy_kept = quiet(numbers(1.02, 1.06));
  busy_kept.other_cpus = 1.93;
  busy_kept.loadavg = 2.4;
  const std::string bk = demo_verdict(busy_kept);
  EXPECT_TRUE(has(bk, "gpuos kept hp within 10% of its latency alone, median and tail, on a machine measured too busy "
                      "to show a 10% difference for sure")) << bk;
  EXPECT_TRUE(has(bk, "other processes kept 1.93 of the demo's 2 CPUs busy")) << bk;
  EXPECT_TRUE(has(bk, "load average 2.40")) << bk;
  // Nothing measured: no machine clause (and no guess).
  const std::string none = demo_verdict(numbers(1.44, 5.1));
  EXPECT_FALSE(has(none, "machine:")) << none;
  EXPECT_FALSE(has(none, "other work")) << none;
}

// A miss on a machine measured busy (other processes' CPU) or noisy (hp alone twice apart by more
// than 10%) cannot be judged: the verdict says so instead of calling it gpuos's.
TEST(DemoVerdict, LoadedMachineCannotTell) {
  DemoNumbers busy = quiet(numbers(1.25, 4.0));
  busy.other_cpus = 1.9;
  busy.loadavg = 3.1;
  const std::string b = demo_verdict(busy);
  EXPECT_TRUE(has(b, "cannot tell on this machine now: it was too busy to judge a 10% difference")) << b;
  EXPECT_TRUE(has(b, "other processes kept 1.90 of the demo's 2 CPUs busy")) << b;
  EXPECT_FALSE(has(b, "did not keep")) << b;
  EXPECT_FALSE(has(b, "within 10% of its latency alone")) << b;

  DemoNumbers noisy = quiet(numbers(1.25, 1.05));
  noisy.again_p50_ratio = 0.8;  // the second hp alone 20% faster than the first: 1.25x apart
  const std::string n = demo_verdict(noisy);
  EXPECT_TRUE(has(n, "cannot tell on this machine now: it was too noisy")) << n;
  EXPECT_TRUE(has(n, "hp alone measured twice came out 1.25x apart at the median")) << n;

  DemoNumbers both = busy;
  both.again_p99_ratio = 1.5;
  EXPECT_TRUE(has(demo_verdict(both), "too busy and too noisy")) << demo_verdict(both);

  // At the bounds: 0.5 of 2 CPUs is busy, 0.49 is not; 1.1x apart is within.
  DemoNumbers edge = quiet(numbers(1.25, 4.0));
  edge.other_cpus = 0.49;
  edge.again_p99_ratio = 1.1;
  EXPECT_TRUE(has(demo_verdict(edge), "on a machine measured quiet")) << demo_verdict(edge);
  edge.other_cpus = 0.5;
  EXPECT_TRUE(has(demo_verdict(edge), "too busy")) << demo_verdict(edge);
}

TEST(MachineLoad, ParsesProc) {
  const CpuTicks t = parse_proc_stat("cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 1 2 3 4\n");
  ASSERT_TRUE(t.ok);
  EXPECT_EQ(t.busy, 100u + 5 + 50 + 3 + 2);
  EXPECT_EQ(t.idle, 1020u);
  EXPECT_EQ(t.steal, 7u);
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3 4").ok);
  EXPECT_FALSE(parse_proc_stat("").ok);
  // Only the CPUs the demo may run on (taskset -c 1,2): cpu1 and cpu2.
  const std::string per_cpu = "cpu  60 0 6 300 0 0 0 3\ncpu0 10 0 1 50 0 0 0 0\ncpu1 20 0 2 100 0 0 0 1\n"
                              "cpu2 30 0 3 150 0 0 0 2\nintr 1 2 3\n";
  const CpuTicks some = parse_proc_stat(per_cpu, {1, 2});
  ASSERT_TRUE(some.ok);
  EXPECT_EQ(some.busy, 55u);
  EXPECT_EQ(some.idle, 250u);
  EXPECT_EQ(some.steal, 3u);
  EXPECT_EQ(parse_proc_stat(per_cpu).busy, 66u);
  EXPECT_FALSE(parse_proc_stat(per_cpu, {7}).ok);

  // A command name with spaces and parentheses; utime stime cutime cstime = 11 12 13 14.
  EXPECT_EQ(parse_pid_stat_ticks("42 (a (b) c) S 1 42 42 0 -1 4194304 98 0 0 0 11 12 13 14 20 0 1 0"), 50);
  EXPECT_EQ(parse_pid_stat_ticks("42 (x) S 1 2"), -1);
  EXPECT_DOUBLE_EQ(parse_loadavg("0.11 0.18 0.20 1/100 123\n"), 0.11);
  EXPECT_DOUBLE_EQ(parse_loadavg(""), -1);

  // 2 s on 2 CPUs at 100 ticks/s: 300 busy ticks, 100 of them the demo's, 20 stolen: 1.1 CPUs.
  CpuTicks a{1000, 5000, 10, true}, b{1300, 5080, 30, true};
  EXPECT_DOUBLE_EQ(other_cpus(a, b, 100, 100, 2), 1.1);
  EXPECT_DOUBLE_EQ(other_cpus(a, b, 400, 100, 2), 0.1);  // own more than busy (tick rounding): steal only
  EXPECT_DOUBLE_EQ(other_cpus(a, CpuTicks{}, 0, 100, 2), -1);
}

}  // namespace
}  // namespace gpuos::cli
