#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One table over the zoo's points (issue #56): every run_matrix.py summary.json found under the
given files and folders (gpu/zoo.sh's runs, or their runs.tgz unpacked), one point each (server
size, load, BE kind, request lengths, arrival seed), and per point and co-located mode:

  TTFT p99 / excl, TTFT from admission p99 / excl, TPOT p99 / excl, BE / excl,
  whether the latency budget B (1.5) is met, the best baseline that meets it, gpuos against it.

  python3 bench/colocation/zoo_table.py RUNS_DIR_OR_SUMMARIES... [--md zoo.md] [--json zoo.json] [--budget 1.5]

B is judged as check_budgets.py --issue 40 judges it (its bound_40 / within_40 / method_40): TPOT p99
and TTFT p99 over exclusive <= B, TTFT from admission at loads >= 0.5 (#40's rule at 50% load,
carried to 70%: there the server's own queue grows whatever runs beside it) and from arrival below;
a gpuos mode on the upper ends of the 95% intervals where the run has them (>= 2 exclusive runs),
a baseline on its point values (the lenient reading for the baselines, as in check_budgets.py).
"gpuos / best" is the gpuos mode's BE over the best baseline's within B (both of exclusive): above 1
gpuos lends more within the same bound. Exit 0 (2: no summary found, or one unreadable).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_budgets  # noqa: E402
import common  # noqa: E402

BUDGET = 1.5
ADMIT_FROM_LOAD = 0.5


def find_summaries(paths: List[str]) -> List[str]:
    """summary.json files: the paths given, and every one under the folders given (sorted)."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, _dirs, files in os.walk(p):
                if "summary.json" in files:
                    out.append(os.path.join(root, "summary.json"))
        else:
            out.append(p)
    return sorted(set(out))


def size_b(s: dict) -> Optional[float]:
    """The server's size in billions: run_matrix's --params-b, else from its model's parameters."""
    if s.get("params_b") is not None:
        return float(s["params_b"])
    params = (((s.get("workload") or {}).get("hp") or {}).get("model") or {}).get("params")
    if not params:
        return None
    b = params / 1e9
    return float(round(b)) if b >= 0.95 else round(b, 1)


def point_of(s: dict, source: str) -> dict:
    wl = s.get("workload") or {}
    hp = wl.get("hp") or {}
    return {"source": source, "label": s.get("label"), "gpu": s.get("gpu"), "commit": s.get("commit"),
            "size_b": size_b(s), "load": s.get("load"), "be": wl.get("be"),
            "lengths": s.get("lengths") or hp.get("lengths") or "fixed",
            "seed": s.get("seed") if s.get("seed") is not None else hp.get("seed", 1),
            "method": check_budgets.method_40(s)}


def judge(s: dict, source: str = "", budget: float = BUDGET) -> dict:
    """One run's point and its co-located modes against B."""
    pt = point_of(s, source)
    ci = pt["method"]["check"] == "ci95_upper"
    admit = (pt["load"] or 0.0) >= ADMIT_FROM_LOAD
    pt["ttft_from"] = "admission" if admit else "arrival"
    rows = []
    for r in s.get("modes", []):
        if r["mode"].startswith("exclusive-"):
            continue
        gpuos = r["mode"].startswith("gpuos-")
        bound = check_budgets.bound_40(r, admit, ci and gpuos)
        rows.append({"mode": r["mode"], "gpuos": gpuos, "status": r.get("status"),
                     "ttft_p99_vs_excl": r.get("hp_ttft_p99_vs_exclusive"),
                     "ttft_admit_p99_vs_excl": r.get("hp_ttft_admit_p99_vs_exclusive"),
                     "tpot_p99_vs_excl": r.get("hp_tpot_p99_vs_exclusive"),
                     "be_vs_excl": r.get("be_vs_exclusive"),
                     "bound": bound, "check": "ci95_upper" if ci and gpuos else "point",
                     "met": None if bound is None else bound <= budget})
    base = [x for x in rows if check_budgets._is_baseline(x["mode"]) and x["met"]]
    best = max(base, key=lambda x: x["be_vs_excl"] or 0.0, default=None)
    pt["best_baseline"] = None if best is None else {"mode": best["mode"], "be_vs_excl": best["be_vs_excl"]}
    for x in rows:
        if x["gpuos"]:
            b_be = best["be_vs_excl"] if best else None
            x["vs_best_baseline"] = (x["be_vs_excl"] / b_be if b_be and x["be_vs_excl"] is not None else None)
    pt["modes"] = rows
    return pt


LENGTHS_ORDER = ("fixed", "azure-conv", "azure-code")


def _key(p: dict):
    ln = LENGTHS_ORDER.index(p["lengths"]) if p["lengths"] in LENGTHS_ORDER else len(LENGTHS_ORDER)
    return (p["size_b"] or 0.0, ln, p["lengths"], p["be"] or "", p["load"] or 0.0, p["seed"] or 0, p["label"] or "")


def point_name(p: dict) -> str:
    size = "?" if p["size_b"] is None else f"{p['size_b']:g}B"
    seed = f" s{p['seed']}" if p["seed"] not in (None, 1) else ""
    return f"{size} {p['load']:g} {p['be']} {p['lengths']}{seed}"


def markdown(points: List[dict], budget: float) -> str:
    f = lambda x: "-" if x is None else common.fmt(x)  # noqa: E731
    yes = {True: "yes", False: "NO", None: "-"}
    out = [f"# The zoo: {len(points)} points, B = {budget:g}", "",
           f"B met: TPOT p99 and TTFT p99 (from admission at loads >= {ADMIT_FROM_LOAD:g}, else from arrival) "
           f"over exclusive <= {budget:g}; gpuos modes on the upper ends of their 95% intervals where the run "
           "has them, baselines on their point values. gpuos / best: the gpuos mode's BE over the best "
           "baseline's that meets B.", "",
           "| point | gpuos mode | B met | BE / excl | best baseline within B | its BE / excl | gpuos / best |",
           "|---|---|---|---|---|---|---|"]
    for p in points:
        best = p["best_baseline"]
        gp = [x for x in p["modes"] if x["gpuos"]] or [None]
        for x in gp:
            out.append(f"| {point_name(p)} | {x['mode'] if x else '-'} | {yes[x['met']] if x else '-'} "
                       f"| {f(x['be_vs_excl']) if x else '-'} | {best['mode'] if best else 'none'} "
                       f"| {f(best['be_vs_excl']) if best else '-'} | {f(x.get('vs_best_baseline')) if x else '-'} |")
    out += ["", "Per mode:", "",
            "| point | mode | TTFT p99/excl | TTFT adm p99/excl | TPOT p99/excl | BE / excl | bound | B met | status |",
            "|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        for x in p["modes"]:
            out.append(f"| {point_name(p)} | {x['mode']} | {f(x['ttft_p99_vs_excl'])} | "
                       f"{f(x['ttft_admit_p99_vs_excl'])} | {f(x['tpot_p99_vs_excl'])} | {f(x['be_vs_excl'])} | "
                       f"{f(x['bound'])}{' (ci)' if x['check'] == 'ci95_upper' else ''} | {yes[x['met']]} | "
                       f"{x['status'] or ''} |")
    out.append("")
    for p in points:
        m = p["method"]
        out.append(f"- {point_name(p)}: {p['label']} ({p['source']}), {p['gpu']}, commit {p['commit']}; "
                   f"TTFT from {p['ttft_from']}; {m['exclusive_runs']} exclusive run(s), window "
                   f"{'?' if m['window_s'] is None else format(m['window_s'], 'g')} s"
                   + ("" if m["follows"] else " (not by #40's method: a point check)"))
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="summary.json files, or folders to search for them")
    ap.add_argument("--md", help="write the table here too")
    ap.add_argument("--json", help="write the points here")
    ap.add_argument("--budget", type=float, default=BUDGET, help=f"the latency budget B (default {BUDGET:g})")
    a = ap.parse_args(argv)
    files = find_summaries(a.paths)
    if not files:
        print("zoo_table: no summary.json under " + " ".join(a.paths), file=sys.stderr)
        return 2
    points = []
    for path in files:
        try:
            with open(path) as fh:
                points.append(judge(json.load(fh), check_budgets.run_label(path), a.budget))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"zoo_table: {path}: {e}", file=sys.stderr)
            return 2
    points.sort(key=_key)
    md = markdown(points, a.budget)
    sys.stdout.write(md)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(md)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"budget": a.budget, "admit_from_load": ADMIT_FROM_LOAD, "points": points}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
