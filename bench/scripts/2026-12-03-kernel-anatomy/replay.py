#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What the right-sizer's step to 56 SMs cost the HP's p99 in matrix run 2 (instrumented kernel).

Replays the GPU's own timeline of the gpuos-space-priority HP (gpuos-synth --device-trace: every
kernel's start, duration and gap) against its Poisson arrivals: a kernel starts when it is ready
(arrival plus the launch path, calibrated on kernels that found the GPU idle) or when the one before
has ended plus the gap the GPU left there, whichever is later. The replay of the measured durations
reproduces the measured p99; the same replay with the kernels that ran on 56 SMs (two blocks on some
SMs, 1.27x) at their 64-SM duration says what the sizer's stop at the grid should give.

  python3 bench/scripts/2026-12-03-kernel-anatomy/replay.py [RESULTS_DIR]

RESULTS_DIR defaults to bench/results/2026-12-03-kernel-anatomy (the run this script belongs to);
it reads RESULTS_DIR/matrix/run2-traced/traces.tgz.
"""
import io
import os
import statistics
import sys
import tarfile

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results",
                           "2026-12-03-kernel-anatomy")


def csv_rows(tar, name):
    text = tar.extractfile(name).read().decode()
    return [list(map(float, line.split(","))) for line in text.split("\n")[1:] if line]


def p99(values):
    return sorted(values)[int(0.99 * len(values))]


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else RESULTS_DIR
    with tarfile.open(os.path.join(results, "matrix", "run2-traced", "traces.tgz")) as tar:
        dev = csv_rows(tar, "gpuos-space-priority.hp-device.csv")   # start_us, dur_us, gap_us, max_blocks_per_sm
        host = csv_rows(tar, "gpuos-space-priority.hp-trace.csv")   # arrival_ns, latency_us, launch_us
        excl = csv_rows(tar, "exclusive-hp.hp-trace.csv")
    n = min(len(dev), len(host))
    arrival = [(h[0] - host[0][0]) / 1e3 for h in host[:n]]
    start = [d[0] for d in dev[:n]]
    dur = [d[1] for d in dev[:n]]
    gap = [d[2] for d in dev[:n]]
    # Device clock minus host clock for a kernel that found the GPU idle (launch path included).
    offset = statistics.median(start[i] - arrival[i] for i in range(1, n) if gap[i] > 50)
    ready = [a + offset for a in arrival]

    def ends(durations):
        out, prev = [], float("-inf")
        for i in range(n):
            g = gap[i] if 0 <= gap[i] < 30 else 2.0
            begin = max(ready[i], prev + g)
            prev = begin + durations[i]
            out.append(prev)
        return out

    measured_end = [start[i] + dur[i] for i in range(n)]
    latency = [h[1] for h in host[:n]]
    replay = ends(dur)
    at_grid = ends([300.5 if dev[i][3] > 1 and dur[i] > 350 else dur[i] for i in range(n)])
    ex = p99([h[1] for h in excl])
    rep = p99([latency[i] - (measured_end[i] - replay[i]) for i in range(n)])
    fix = p99([latency[i] - (measured_end[i] - at_grid[i]) for i in range(n)])
    packed = sum(1 for d in dev[:n] if d[3] > 1)
    print(f"kernels {n}, of them on 56 SMs (two blocks on an SM): {packed}")
    print(f"exclusive p99 {ex:.0f} us; space measured {p99(latency):.0f} ({p99(latency) / ex:.3f}x), "
          f"replayed {rep:.0f}; without the 56-SM step {fix:.0f} ({fix / ex:.3f}x)")


if __name__ == "__main__":
    main()
