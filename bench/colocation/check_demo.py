#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue #40's demo line, checked from `gpuos demo --json` files (gpu/demo_runs.sh writes them):
at least three runs on a GPU, each with hp_p99_ratio <= 1.1 and a verdict that matches its numbers.

  python3 bench/colocation/check_demo.py DIR/demo-*.json [--stamp COMMIT] [--md OUT.md]

A verdict matches when it says hp stayed "within 10% of its latency alone, median and tail" exactly
when both of its ratios are within 1.1 (src/cli/demo_verdict.h). --stamp records the commit the
binaries were built from in each file that has none (a results JSON carries its commit).
Prints one row per run and the verdict; exit status 0 whether or not the line holds. A file that does
not read as JSON (a demo that crashed) is a run that does not count.
"""
from __future__ import annotations

import argparse
import json
import sys

ALONE_RATIO = 1.1  # src/cli/demo_verdict.h kAloneRatio
KEPT = "within 10% of its latency alone, median and tail"
RUNS_NEEDED = 3


def check_run(d: dict) -> dict:
    """One demo's JSON: whether it counts for the line, and why not."""
    p50, p99 = d.get("hp_p50_ratio"), d.get("hp_p99_ratio")
    verdict = d.get("verdict") or ""
    problems = []
    if d.get("simulated", True):
        problems.append("simulated device, not a GPU")
    if not d.get("ok"):
        problems.append("the demo failed")
    if not isinstance(p50, (int, float)) or not isinstance(p99, (int, float)):
        problems.append("no ratios")
    else:
        if p99 > ALONE_RATIO:
            problems.append(f"hp p99 {p99:.3f}x alone > {ALONE_RATIO}")
        kept = p50 <= ALONE_RATIO and p99 <= ALONE_RATIO
        if (KEPT in verdict) != kept:
            problems.append("the verdict does not match the numbers")
    return {"p50": p50, "p99": p99, "sharing": d.get("sharing"), "device": d.get("device"),
            "commit": d.get("commit"), "verdict": verdict, "ok": not problems, "problems": problems}


def verdict(runs: list) -> dict:
    good = sum(1 for r in runs if r["ok"])
    return {"runs": len(runs), "runs_ok": good, "holds": len(runs) >= RUNS_NEEDED and good == len(runs)}


def markdown(names: list, runs: list, v: dict) -> str:
    f = lambda x: "-" if not isinstance(x, (int, float)) else f"{x:.3f}"  # noqa: E731
    rows = ["| run | commit | sharing | hp p50 x alone | hp p99 x alone | counts | verdict |",
            "|---|---|---|---|---|---|---|"]
    for name, r in zip(names, runs):
        counts = "yes" if r["ok"] else "no: " + "; ".join(r["problems"])
        rows.append(f"| {name} | {r['commit'] or '-'} | {r['sharing'] or '-'} | {f(r['p50'])} | {f(r['p99'])} "
                    f"| {counts} | {r['verdict']} |")
    rows.append("")
    rows.append(f"issue #40's demo line (>= {RUNS_NEEDED} GPU runs, each hp p99 <= {ALONE_RATIO}x alone and a "
                f"matching verdict): {'holds' if v['holds'] else 'does NOT hold'} ({v['runs_ok']} of {v['runs']} "
                f"runs count)")
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demos", nargs="+", help="`gpuos demo --json` output files")
    ap.add_argument("--stamp", help="record this commit in each file that has none")
    ap.add_argument("--md", help="also write the table here")
    a = ap.parse_args(argv)
    runs, names = [], []
    for path in a.demos:
        try:
            with open(path) as fh:
                d = json.load(fh)
            if a.stamp and not d.get("commit"):
                d["commit"] = a.stamp
                with open(path, "w") as fh:
                    json.dump(d, fh, indent=1, sort_keys=True)
        except (OSError, ValueError) as e:
            d = {"ok": False, "verdict": f"unreadable: {e}"}
        runs.append(check_run(d))
        names.append(path.rsplit("/", 1)[-1])
    md = markdown(names, runs, verdict(runs))
    sys.stdout.write(md)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
