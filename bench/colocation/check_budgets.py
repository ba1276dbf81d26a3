#!/usr/bin/env python3
"""Issue #23's done-when, checked from committed results: the summary.json of one run per load
(and of the load-step run), as run_matrix.py writes them.

  python3 bench/colocation/check_budgets.py bench/results/*-slo-*/summary.json [--json OUT]

For each run (its load, BE workload, GPU) and each budget B among its gpuos-*-slo-B modes:
  - met: some gpuos mode of budget B kept HP's TTFT and TPOT p99 within B x exclusive (hp_slo_ok);
  - be: the most BE throughput (of its exclusive) a gpuos mode of budget B gave while meeting it;
  - baseline_be: the most any baseline gave while within B (None: no baseline is);
  - dominates: met, and be >= baseline_be.
Per issue target: at 50% load beside training, be >= 0.20 at B = 1.25 and >= 0.33 at B = 1.5;
in a load-step run, every budgeted mode within B in every 1 s window after the step (hp_step_ok).
Prints a markdown table; exit status 0 whether or not the targets hold (2: unreadable input).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402

# Issue #23: the BE throughput each budget must reach at 50% load beside training.
BE_TARGETS = {1.25: 0.20, 1.5: 0.33}
TARGET_LOAD = 0.5


def check_run(s: dict, source: str = "") -> dict:
    """One summary.json: its verdict per budget, and its load-step verdict if it is a step run."""
    modes = s.get("modes", [])
    workload = s.get("workload") or {}
    out = {"source": source, "gpu": s.get("gpu"), "load": s.get("load"), "load_step": s.get("load_step"),
           "be": workload.get("be") if isinstance(workload, dict) else None, "budgets": []}
    # Per budget, the gpuos modes that meet it and the best baseline within it: report.frontier's.
    for e in report.frontier(s)["budgets"]:
        b, baseline_be = e["budget"], e["best_baseline_be"]
        best = max((g for g in e["gpuos"] if g["meets_bound"]), key=lambda g: g["be_vs_exclusive"], default=None)
        ours = [r for r in modes if r.get("budget") == b]
        entry = {"budget": b, "met": best is not None, "mode": best["mode"] if best else None,
                 "be": best["be_vs_exclusive"] if best else None, "baseline_be": baseline_be,
                 "dominates": best is not None and (baseline_be is None or best["be_vs_exclusive"] >= baseline_be)}
        target = BE_TARGETS.get(b)
        if target is not None and out["load"] == TARGET_LOAD and out["be"] == "train" and not out["load_step"]:
            entry["be_target"] = target
            entry["be_target_ok"] = best is not None and best["be_vs_exclusive"] >= target
        if out["load_step"]:
            entry["step_ok"] = bool(ours) and all(r.get("hp_step_ok") is True for r in ours)
        out["budgets"].append(entry)
    return out


def verdict(runs: list) -> dict:
    """Every target across the runs: True, False, or None where no run measured it."""
    entries = [e for r in runs for e in r["budgets"]]
    plain = [e for r in runs if not r["load_step"] for e in r["budgets"]]
    steps = [e for r in runs if r["load_step"] for e in r["budgets"]]
    be = [e for e in plain if "be_target_ok" in e]

    def all_of(xs, key):
        return all(e[key] for e in xs) if xs else None

    return {"every_budget_met": all_of(plain, "met"), "be_targets_met": all_of(be, "be_target_ok"),
            "frontier_dominates": all_of(plain, "dominates"), "load_step_within_budget": all_of(steps, "step_ok"),
            "runs": len(runs), "budgets_checked": len(entries)}


def markdown(runs: list, v: dict) -> str:
    f = lambda x: "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))  # noqa: E731
    out = ["| run | load | BE | B | met by | BE / excl | best baseline within B | dominates | target |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        load = str(r["load"]) + (f" -> {r['load_step'].get('to')}" if r["load_step"] else "")
        for e in r["budgets"]:
            target = ""
            if "be_target" in e:
                target = f"BE >= {e['be_target']}: {'ok' if e['be_target_ok'] else 'MISS'}"
            if "step_ok" in e:
                target = f"every 1 s window: {'ok' if e['step_ok'] else 'MISS'}"
            out.append(f"| {r['source']} | {load} | {r['be']} | {e['budget']} | {e['mode'] or 'none'} | {f(e['be'])} "
                       f"| {f(e['baseline_be'])} | {'yes' if e['dominates'] else 'no'} | {target} |")
    out.append("")
    for k in ("every_budget_met", "be_targets_met", "frontier_dominates", "load_step_within_budget"):
        out.append(f"- {k}: {'not measured' if v[k] is None else ('yes' if v[k] else 'NO')}")
    return "\n".join(out) + "\n"


def run_label(path: str) -> str:
    """A run's name: its results folder, and the run's for a part of one
    (bench/results/<run>/<part>/summary.json is <run>/<part>)."""
    folder = os.path.dirname(os.path.abspath(path))
    above = os.path.dirname(folder)
    if os.path.basename(os.path.dirname(above)) == "results":
        return f"{os.path.basename(above)}/{os.path.basename(folder)}"
    return os.path.basename(folder)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summaries", nargs="+", help="summary.json of a run_matrix.py run")
    ap.add_argument("--json", help="also write the verdicts here")
    a = ap.parse_args(argv)
    runs = []
    for path in a.summaries:
        try:
            with open(path) as fh:
                s = json.load(fh)
            runs.append(check_run(s, run_label(path)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"check_budgets: {path}: {e}", file=sys.stderr)
            return 2
    v = verdict(runs)
    sys.stdout.write(markdown(runs, v))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"verdict": v, "runs": runs}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
