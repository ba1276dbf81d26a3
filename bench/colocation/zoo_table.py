#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One table over the zoo's points (issue #56): every run_matrix.py summary.json found under the
given files and folders (gpu/zoo.sh's runs, or their runs.tgz unpacked), one point each (server
size, load, BE kind, request lengths, arrival seed), and per point and co-located mode:

  TTFT p99 / excl, TTFT from admission p99 / excl, TPOT p99 / excl, BE / excl,
  whether the latency budget B (1.5) is met, the best baseline that meets it, gpuos against it,
  and how much of each budget's B - 1 was spent, with what gpuosd said held it (its probe lines'
  budget_limit, from raw.json).

  python3 bench/colocation/zoo_table.py RUNS_DIR_OR_SUMMARIES... [--md zoo.md] [--json zoo.json] [--budget 1.5]

B is judged as check_budgets.py --issue 40 judges it (its bound_40 / within_40 / method_40): TPOT p99
and TTFT p99 over exclusive <= B, TTFT from admission at loads >= 0.5 (#40's rule at 50% load,
carried to 70%: there the server's own queue grows whatever runs beside it) and from arrival below;
a gpuos mode on the upper ends of the 95% intervals where the run has them (>= 2 exclusive runs),
a baseline on its point values (the lenient reading for the baselines, as in check_budgets.py).
"gpuos / best" is the gpuos mode's BE over the best baseline's within B (both of exclusive): above 1
gpuos lends more within the same bound.

A run by method v2 (run_matrix.py --paired-seeds, gpu/zoo.sh method=v2) is judged by it instead
(method_v2.py): its rows are its modes over their included pairs, a gpuos mode meeting B when the
bootstrap 95% upper bound of its bound ratio is <= B ("upper95"), a baseline on the mean over its
pairs (the lenient reading again). A mode with fewer than 3 included pairs, and every run without
--paired-seeds, is a POINT CHECK, so labelled in every row ("method": "v2" or "point").

The headline (issue #56 item 5, method_v2.py; the SLO in README.md, "The headline"): per point and
mode SLO attainment, HP goodput / alone (0 below 99% attainment), BE / alone and the aggregate, over
the run's best baseline's aggregate (exclusive 1.0 or a baseline mode's) and over dedicated GPUs'
1.0 per GPU. And per server size, BE kind and lengths, over the zoo's loads: the highest load whose
attainment stays >= 99% at it and every lower load measured, alone and beside BE per mode (from the
runs' raw.json beside their summary.json; the SLO fixed at B x the lowest load's alone p99).
zoo.json has "commit" (the table's: $GPUOS_COMMIT or git's) and each point its run's.
Exit 0 (2: no summary found, or one unreadable).
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
import method_v2  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUDGET = method_v2.SLO_BUDGET
ADMIT_FROM_LOAD = method_v2.ADMIT_FROM_LOAD


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


HEADLINE = ("attainment", "hp_goodput_vs_alone", "be_vs_alone", "aggregate", "aggregate_vs_best_baseline",
            "aggregate_per_gpu_vs_dedicated")


def judge(s: dict, source: str = "", budget: float = BUDGET) -> dict:
    """One run's point and its co-located modes against B."""
    pt = point_of(s, source)
    ci = pt["method"]["check"] == "ci95_upper"
    admit = (pt["load"] or 0.0) >= ADMIT_FROM_LOAD
    pt["ttft_from"] = "admission" if admit else "arrival"
    paired = s.get("paired") or {}
    v2 = bool(paired.get("paired"))
    pm = paired.get("modes") or {}
    pt["method_v2"] = {"method": paired.get("method", "point"), "paired": v2, "seeds": paired.get("seeds"),
                       "excluded": paired.get("excluded") or [], "best_baseline": paired.get("best_baseline"),
                       "slo": paired.get("slo")}
    rows = []
    for r in common.run_modes(s):
        if r["mode"].startswith("exclusive-"):
            continue
        gpuos = r["mode"].startswith("gpuos-")
        m = pm.get(r["mode"]) or {}
        if v2:
            bound = m.get("bound_upper95") if gpuos else m.get("bound_mean")
            check = "upper95" if gpuos else "pairs_mean"
        else:
            bound = check_budgets.bound_40(r, admit, ci and gpuos)
            check = "ci95_upper" if ci and gpuos else "point"
        rows.append({"mode": r["mode"], "gpuos": gpuos, "status": r.get("status"),
                     "method": m.get("method", "point"), "pairs": m.get("pairs", 1 if r.get("status") == "ok" else 0),
                     "upper95": m.get("upper95"),
                     "ttft_p99_vs_excl": r.get("hp_ttft_p99_vs_exclusive"),
                     "ttft_admit_p99_vs_excl": r.get("hp_ttft_admit_p99_vs_exclusive"),
                     "tpot_p99_vs_excl": r.get("hp_tpot_p99_vs_exclusive"),
                     "be_vs_excl": r.get("be_vs_exclusive"),
                     "bound": bound, "check": check,
                     "met": None if bound is None else bound <= budget,
                     **{k: m.get(k) for k in HEADLINE}})
    base = [x for x in rows if check_budgets._is_baseline(x["mode"]) and x["met"]]
    best = max(base, key=lambda x: x["be_vs_excl"] or 0.0, default=None)
    pt["best_baseline"] = None if best is None else {"mode": best["mode"], "be_vs_excl": best["be_vs_excl"]}
    for x in rows:
        if x["gpuos"]:
            b_be = best["be_vs_excl"] if best else None
            x["vs_best_baseline"] = (x["be_vs_excl"] / b_be if b_be and x["be_vs_excl"] is not None else None)
    pt["modes"] = rows
    return pt


# Issue #56: a budget counts as spent when its bound used at least this fraction of B - 1 (as
# gpuosd's budget_limit judges its meter: src/policies/budget/stages.h, kSpentFraction).
SPENT_FRACTION = 0.7


def note_spent(pt: dict, raw: Optional[dict]) -> None:
    """Each budgeted gpuos mode's share of B - 1 its bound used ("spent"), and what gpuosd's probe lines said
    held it unspent ("held_by": limit name -> lines, from raw.json's budget_log; None before #56's
    budget_limit or without raw.json)."""
    modes = (raw or {}).get("modes") or {}
    for x in pt["modes"]:
        try:
            b = common.mode_budget(x["mode"]) if x["gpuos"] else None  # the mode's own B (1.25, 1.5)
        except ValueError:
            b = None
        if not b:
            continue
        x["spent"] = None if x["bound"] is None or b <= 1 else (x["bound"] - 1) / (b - 1)
        x["held_by"] = ((modes.get(x["mode"]) or {}).get("budget_log") or {}).get("limits")


LENGTHS_ORDER = ("fixed", "azure-conv", "azure-code")


def _key(p: dict):
    ln = LENGTHS_ORDER.index(p["lengths"]) if p["lengths"] in LENGTHS_ORDER else len(LENGTHS_ORDER)
    return (p["size_b"] or 0.0, ln, p["lengths"], p["be"] or "", p["load"] or 0.0, p["seed"] or 0, p["label"] or "")


def point_name(p: dict) -> str:
    size = "?" if p["size_b"] is None else f"{p['size_b']:g}B"
    seed = f" s{p['seed']}" if p["seed"] not in (None, 1) else ""
    return f"{size} {p['load']:g} {p['be']} {p['lengths']}{seed}"


def _method(x: Optional[dict]) -> str:
    """A row's method cell: v2 (>= 3 included pairs, bootstrap bound) or POINT CHECK."""
    if not x:
        return "-"
    return f"v2 ({x.get('pairs')} pairs)" if x.get("method") == "v2" else f"POINT CHECK ({x.get('pairs')})"


CHECK_MARK = {"ci95_upper": " (ci)", "upper95": " (up95)", "pairs_mean": " (mean)", "point": ""}


def markdown(points: List[dict], budget: float) -> str:
    f = lambda x: "-" if x is None else common.fmt(x)  # noqa: E731
    yes = {True: "yes", False: "NO", None: "-"}
    out = [f"# The zoo: {len(points)} points, B = {budget:g}", "",
           f"B met: TPOT p99 and TTFT p99 (from admission at loads >= {ADMIT_FROM_LOAD:g}, else from arrival) "
           f"over exclusive <= {budget:g}. By method v2 (paired seeds): a gpuos mode on the bootstrap 95% upper "
           "bound over its pairs (up95), a baseline on the mean over its pairs; fewer than "
           f"{method_v2.MIN_PAIRS} pairs, or a run without paired seeds, is a POINT CHECK (#40's rule then: gpuos "
           "modes on the upper ends of their 95% intervals where the run has them, baselines on their point "
           "values). gpuos / best: the gpuos mode's BE over the best baseline's that meets B.", "",
           f"Aggregate at the SLO (per request TTFT <= {budget:g} x alone TTFT p99 and TPOT <= {budget:g} x alone "
           f"TPOT p99, the same seed's): HP goodput / alone counts only at attainment >= "
           f"{method_v2.ATTAINMENT_TARGET:.0%} (else 0); aggregate = HP goodput / alone + BE / alone; best "
           f"baseline: the run's largest aggregate (exclusive 1.0 or a baseline mode's); dedicated GPUs: "
           f"{method_v2.DEDICATED_PER_GPU:g} per GPU. Max load at 99%: the highest load of the zoo's for that "
           "server, BE and lengths whose attainment (SLO fixed at the lowest load's alone p99) holds at it and "
           "every lower load measured, alone / beside BE.", "",
           "| point | method | gpuos mode | B met | BE / excl | best baseline within B | its BE / excl | gpuos / best "
           "| attainment | HP goodput / alone | aggregate | best baseline aggregate | / best | per GPU / dedicated "
           "| max load at 99% alone / beside |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        best = p["best_baseline"]
        bagg = (p.get("method_v2") or {}).get("best_baseline") or {}
        ml = p.get("max_load_99") or {}
        gp = [x for x in p["modes"] if x["gpuos"]] or [None]
        for x in gp:
            beside = (ml.get("modes") or {}).get(x["mode"]) if x else None
            out.append(f"| {point_name(p)} | {_method(x)} | {x['mode'] if x else '-'} | {yes[x['met']] if x else '-'} "
                       f"| {f(x['be_vs_excl']) if x else '-'} | {best['mode'] if best else 'none'} "
                       f"| {f(best['be_vs_excl']) if best else '-'} | {f(x.get('vs_best_baseline')) if x else '-'} "
                       f"| {f(x.get('attainment')) if x else '-'} | {f(x.get('hp_goodput_vs_alone')) if x else '-'} "
                       f"| {f(x.get('aggregate')) if x else '-'} | {f(bagg.get('aggregate'))} ({bagg.get('mode') or '-'}) "
                       f"| {f(x.get('aggregate_vs_best_baseline')) if x else '-'} "
                       f"| {f(x.get('aggregate_per_gpu_vs_dedicated')) if x else '-'} "
                       f"| {f(ml.get('alone'))} / {f(beside)} |")
    out += ["", "Per mode:", "",
            "| point | mode | method | TTFT p99/excl | TTFT adm p99/excl | TPOT p99/excl | TTFT up95 | TTFT adm up95 "
            "| TPOT up95 | BE / excl | bound | B met | attainment | HP goodput / alone | aggregate | / best | status |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        for x in p["modes"]:
            up = x.get("upper95") or {}
            out.append(f"| {point_name(p)} | {x['mode']} | {_method(x)} | {f(x['ttft_p99_vs_excl'])} | "
                       f"{f(x['ttft_admit_p99_vs_excl'])} | {f(x['tpot_p99_vs_excl'])} | {f(up.get('ttft'))} | "
                       f"{f(up.get('ttft_admit'))} | {f(up.get('tpot'))} | {f(x['be_vs_excl'])} | "
                       f"{f(x['bound'])}{CHECK_MARK.get(x['check'], '')} | {yes[x['met']]} | "
                       f"{f(x.get('attainment'))} | {f(x.get('hp_goodput_vs_alone'))} | {f(x.get('aggregate'))} | "
                       f"{f(x.get('aggregate_vs_best_baseline'))} | {x['status'] or ''} |")
    out += ["", f"The budget spent (#56: the bound uses at least {SPENT_FRACTION:.0%} of B - 1 where the BE has work; "
            "else gpuosd names what held it, probe lines per name):", "",
            "| point | gpuos mode | bound | spent | held by (gpuosd) |", "|---|---|---|---|---|"]
    for p in points:
        for x in p["modes"]:
            if "spent" in x:
                held = ", ".join(f"{k} x{v}" for k, v in (x.get("held_by") or {}).items()) or "-"
                out.append(f"| {point_name(p)} | {x['mode']} | {f(x['bound'])} | "
                           f"{'-' if x.get('spent') is None else format(x['spent'], '.0%')} | {held} |")
    out.append("")
    for p in points:
        m = p["method"]
        v2 = p.get("method_v2") or {}
        if v2.get("paired"):
            how = (f"method v2 over seeds {','.join(map(str, v2.get('seeds') or []))}"
                   + ("" if v2.get("method") == "v2" else " (POINT CHECK: a mode has fewer than "
                      f"{method_v2.MIN_PAIRS} included pairs)"))
            how += "".join(f"; excluded seed {e['seed']}: {e['reason']}" for e in v2.get("excluded") or [])
        else:
            how = (f"{m['exclusive_runs']} exclusive run(s), window "
                   f"{'?' if m['window_s'] is None else format(m['window_s'], 'g')} s"
                   + ("" if m["follows"] else " (not by #40's method: a point check)"))
        out.append(f"- {point_name(p)}: {p['label']} ({p['source']}), {p['gpu']}, commit {p['commit']}; "
                   f"TTFT from {p['ttft_from']}; {how}")
    return "\n".join(out) + "\n"


def logs_of(s: dict, raw: Optional[dict]) -> Optional[dict]:
    """A point's per-request logs for the highest load at 99% (method_v2.max_load): its included
    pairs' alone runs and, per mode, its co-located runs. None without raw.json."""
    if not raw:
        return None
    modes = raw.get("modes") or {}
    paired = s.get("paired") or {}
    out = {"load": s.get("load"), "alone": [], "alone_hp": [], "modes": {}}
    for e in paired.get("pairs") or []:
        if not e.get("included"):
            continue
        hp = (modes.get(e["alone"]) or {}).get("hp") or {}
        if hp.get("request_log"):
            out["alone"].append(hp["request_log"])
            out["alone_hp"].append(hp)
        for base, x in (e.get("modes") or {}).items():
            lg = ((modes.get(x["mode"]) or {}).get("hp") or {}).get("request_log")
            if lg and x.get("status") in (None, "ok"):
                out["modes"].setdefault(base, []).append(lg)
    return out if out["alone"] else None


def max_loads(points: List[dict], logs: List[Optional[dict]]) -> None:
    """Per (size, BE, lengths) over its loads: the highest load at 99% attainment, into each of its
    points ("max_load_99")."""
    groups = {}
    for p, lg in zip(points, logs):
        if lg is not None and p["load"] is not None:
            groups.setdefault((p["size_b"], p["be"], p["lengths"]), []).append((p, lg))
    for members in groups.values():
        r = method_v2.max_load([lg for _, lg in members])
        for p, _ in members:
            p["max_load_99"] = {"alone": r["alone"], "modes": r["modes"], "slo_ms": r["slo_ms"], "loads": r["loads"]}


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
    points, logs = [], []
    for path in files:
        try:
            with open(path) as fh:
                s = json.load(fh)
            points.append(judge(s, check_budgets.run_label(path), a.budget))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"zoo_table: {path}: {e}", file=sys.stderr)
            return 2
        raw = common.read_json(os.path.join(os.path.dirname(path), "raw.json"))
        note_spent(points[-1], raw)
        logs.append(logs_of(s, raw))
    max_loads(points, logs)
    points.sort(key=_key)
    md = markdown(points, a.budget)
    sys.stdout.write(md)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(md)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"budget": a.budget, "admit_from_load": ADMIT_FROM_LOAD, "commit": common.commit_of(REPO),
                       "slo": {"budget": a.budget, "attainment_target": method_v2.ATTAINMENT_TARGET,
                               "dedicated_per_gpu": method_v2.DEDICATED_PER_GPU},
                       "points": points}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
