#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Co-location report: summary.json, summary.md, frontier.json, cdf.png, be.png and frontier.png
from the runner's raw.json.

  python3 bench/colocation/report.py RESULTS_DIR/raw.json [--out DIR]

re-renders everything from raw.json (e.g. on a laptop after fetching the results).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import method_v2  # noqa: E402

SUMMARY_FIELDS = ["mode", "hp_p50_ms", "hp_p99_ms", "hp_p99_vs_exclusive", "hp_ttft_p50_ms",
                  "hp_ttft_p99_ms", "hp_tpot_p50_ms", "hp_tpot_p99_ms", "hp_ttft_p99_vs_exclusive",
                  "hp_ttft_admit_p99_vs_exclusive", "hp_tpot_p99_vs_exclusive", "hp_mean_decode_batch", "hp_requests", "be_throughput", "be_unit", "be_vs_exclusive",
                  "hp_busy_fraction", "budget", "hp_slo_ok", "hp_p99_vs_exclusive_ci95",
                  "hp_ttft_p99_vs_exclusive_ci95", "hp_ttft_admit_p99_vs_exclusive_ci95",
                  "hp_tpot_p99_vs_exclusive_ci95"]
# The exclusive reference: per ratio <name>_vs_exclusive, the p99 it divides by (HP's result's keys).
REF_METRICS = {"hp_p99": ("e2e_ms", "p99"), "hp_ttft_p99": ("ttft_ms", "p99"),
               "hp_ttft_admit_p99": ("ttft_admit_ms", "p99"), "hp_tpot_p99": ("tpot_ms", "p99")}
# What a <name>_vs_exclusive_ci95 interval covers (summary.json's exclusive_reference, summary.md).
CI_MEANING = ("95% interval of the ratio from the spread of the exclusive-hp runs alone: the mode's value "
              "over the ends of the Student-t 95% confidence interval of the exclusive runs' mean (N-1 "
              "degrees of freedom). It covers where HP's true exclusive p99 lies; the mode's own value is one "
              "run, taken as measured: its own run-to-run spread is not in the interval")
# A 1 s window after the load step with fewer requests than this says nothing about a p99: skipped.
STEP_MIN_REQUESTS = 5


def _get(d: Optional[dict], *path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def hp_slowdown(row: dict, from_admission: bool = False) -> Optional[float]:
    """HP's slowdown against exclusive for the latency budget: the worse of TTFT p99 (from
    admission at loads where the budget counts it so: method_v2.ADMIT_FROM_LOAD) and TPOT p99 over
    exclusive; e2e p99 over exclusive where there is neither (the synthetic workload)."""
    ttft = row.get("hp_ttft_admit_p99_vs_exclusive" if from_admission else "hp_ttft_p99_vs_exclusive")
    if from_admission and ttft is None:
        ttft = row.get("hp_ttft_p99_vs_exclusive")
    r = [v for v in (ttft, row.get("hp_tpot_p99_vs_exclusive")) if v is not None]
    return max(r) if r else row.get("hp_p99_vs_exclusive")


def _budget(name: str) -> Optional[float]:
    try:
        return common.mode_budget(name)
    except ValueError:
        return None


def step_check(wins: list, ref: list, budget: float) -> tuple:
    """(ok, skipped) of a load step: ok = in every 1 s window TTFT p99 and TPOT p99 <= budget x
    exclusive-hp's in the same window (same seed, so the same arrivals) and no request unfinished;
    windows with < STEP_MIN_REQUESTS requests here or there are skipped. ok None: nothing compared."""
    by_t = {w["t_s"]: w for w in ref}
    ok, checked, skipped = True, 0, 0
    for w in wins:
        r = by_t.get(w["t_s"])
        n = w["requests"] + w["unfinished"]
        if r is None or n < STEP_MIN_REQUESTS or r["requests"] < STEP_MIN_REQUESTS:
            skipped += 1
            continue
        checked += 1
        if w["unfinished"]:
            ok = False
        for k in ("ttft_p99_ms", "tpot_p99_ms"):
            if w[k] is not None and r[k] is not None and w[k] > budget * r[k]:
                ok = False
    return (ok if checked else None), skipped


def exclusive_reference(meta: dict, modes: dict) -> dict:
    """What every ratio divides by: per REF_METRICS key, common.mean_ci95 of that p99 over the
    exclusive-hp runs that measured it (exclusive-hp and its --exclusive-repeats; one run: its value,
    no interval). runs: the exclusive-hp runs planned, in order."""
    runs = common.exclusive_runs(meta.get("modes_planned") or list(modes))
    metrics = {}
    for k, path in REF_METRICS.items():
        vals = [v for v in (_get(modes.get(n), "hp", *path) for n in runs) if v is not None]
        metrics[k] = common.mean_ci95(vals) if vals else None
    return {"runs": runs, "n": max([m["n"] for m in metrics.values() if m] or [0]), "metrics": metrics,
            "interval": CI_MEANING}


def method(meta: dict, ref: dict, excl_hp: dict) -> dict:
    """Whether the run follows issue #40's method: >= METHOD_MIN_EXCLUSIVE_RUNS exclusive-hp runs
    measured, and HP windows of >= METHOD_MIN_WINDOW_S (the runner's --window; else exclusive-hp's)."""
    w = meta.get("window_s")
    if w is None:
        w = _get(excl_hp, "hp", "window", "seconds")
    n = ref["n"]
    ok = n >= common.METHOD_MIN_EXCLUSIVE_RUNS and w is not None and w >= common.METHOD_MIN_WINDOW_S
    return {"exclusive_runs": n, "window_s": w, "min_exclusive_runs": common.METHOD_MIN_EXCLUSIVE_RUNS,
            "min_window_s": common.METHOD_MIN_WINDOW_S, "follows": ok}


def build_summary(raw: dict) -> dict:
    meta = raw.get("meta", {})
    modes = raw.get("modes", {})
    min_req = meta.get("min_requests", 300)
    excl_hp = modes.get("exclusive-hp", {})
    excl_be = modes.get("exclusive-be", {})
    excl_ref = exclusive_reference(meta, modes)
    means = {k: (excl_ref["metrics"][k] or {}).get("mean") for k in REF_METRICS}
    step = meta.get("load_step")
    be_excl = excl_be.get("be_rate")
    busy = excl_hp.get("hp_busy_fraction")
    be_unit = excl_be.get("be_unit")
    rows = []
    torch_v = nccl_v = world = None
    hp_cfg = be_cfg = None
    notes = []
    for name in meta.get("modes_planned", list(modes)):
        rec = modes.get(name)
        if rec is None:
            continue
        hp = rec.get("hp") or {}
        # A co-located mode replayed with seed s (--paired-seeds): its ratios are against HP alone
        # with the same seed (exclusive-hp+s<s>), the pair's own reference; no interval.
        seed = common.split_seed(name)[1]
        pair_ref = None
        if seed is not None and not name.startswith("exclusive-"):
            alone = _get(modes.get(common.seed_name("exclusive-hp", seed)), "hp") or {}
            pair_ref = {k: _get(alone, *path) for k, path in REF_METRICS.items()}
        ref = pair_ref or means
        torch_v = torch_v or hp.get("torch") or _get(rec, "be", "torch")
        nccl_v = nccl_v or _get(rec, "be", "nccl_version")   # --be ddp: what its rank 0 reported
        world = world or _get(rec, "be", "world_size")
        hp_cfg = hp_cfg or hp.get("config")
        be_cfg = be_cfg or _get(rec, "be", "config")
        row = {
            "mode": name,
            "hp_p50_ms": _get(hp, "e2e_ms", "p50"),
            "hp_p99_ms": _get(hp, "e2e_ms", "p99"),
            "hp_p99_vs_exclusive": _ratio(_get(hp, "e2e_ms", "p99"), ref["hp_p99"]),
            "hp_ttft_p50_ms": _get(hp, "ttft_ms", "p50"),
            "hp_ttft_p99_ms": _get(hp, "ttft_ms", "p99"),
            "hp_tpot_p50_ms": _get(hp, "tpot_ms", "p50"),
            "hp_tpot_p99_ms": _get(hp, "tpot_ms", "p99"),
            "hp_ttft_p99_vs_exclusive": _ratio(_get(hp, "ttft_ms", "p99"), ref["hp_ttft_p99"]),
            "hp_tpot_p99_vs_exclusive": _ratio(_get(hp, "tpot_ms", "p99"), ref["hp_tpot_p99"]),
            "hp_ttft_admit_p99_ms": _get(hp, "ttft_admit_ms", "p99"),
            "hp_ttft_admit_p99_vs_exclusive": _ratio(_get(hp, "ttft_admit_ms", "p99"),
                                                     ref["hp_ttft_admit_p99"]),
            # The server's slot occupancy: requests in its decode batch on average.
            "hp_mean_decode_batch": _get(hp, "steps", "mean_decode_batch"),
            "hp_requests": hp.get("requests"),
            "be_throughput": rec.get("be_rate"),
            "be_unit": rec.get("be_unit") or (be_unit if rec.get("be_rate") is not None else None),
            "be_vs_exclusive": _ratio(rec.get("be_rate"), be_excl),
            "hp_busy_fraction": busy,
            "status": rec.get("status"),
            "hp_unfinished": hp.get("unfinished"),
            "hp_offered_rps": hp.get("offered_rps"),
            "hp_achieved_rps": hp.get("achieved_rps"),
            "hp_requests_ok": (hp.get("requests", 0) >= min_req) if hp else None,
            "error": rec.get("error"),
            "notes": rec.get("notes") or [],
        }
        for k, path in REF_METRICS.items():  # null with one exclusive run
            row[f"{k}_vs_exclusive_ci95"] = (None if pair_ref else
                                             common.ratio_ci95(_get(hp, *path), excl_ref["metrics"][k]))
        row["budget"] = _budget(name)
        slow = hp_slowdown(row)
        row["hp_slo_ok"] = None if row["budget"] is None or slow is None else slow <= row["budget"]
        if step and hp.get("request_log"):
            at_s = (hp.get("load_step") or {}).get("at_s", 0.0)
            row["hp_windows"] = common.request_windows(hp["request_log"], at_s)
        rows.append(row)
    if step:
        ref = next((r.get("hp_windows") for r in rows if r["mode"] == "exclusive-hp"), None) or []
        for r in rows:
            if r["budget"] is not None:
                r["hp_step_ok"], r["hp_step_windows_skipped"] = (
                    step_check(r.get("hp_windows") or [], ref, r["budget"]) if ref else (None, None))
    paired = method_v2.analyse(meta, modes)
    rows = with_paired(rows, paired, excl_be.get("be_unit"))
    hp_rows = [r for r in rows if r["hp_requests"] is not None]
    all_ok = bool(hp_rows) and all(r["hp_requests_ok"] for r in hp_rows)
    if hp_rows:
        notes.append(f"every HP run has >= {min_req} requests" if all_ok
                     else f"some HP runs have < {min_req} requests: their p99 is weak")
    if busy is not None:
        notes.append(f"HP alone at this load keeps the GPU busy {busy:.0%} of the time; a BE that used "
                     f"all the rest would reach {1 - busy:.0%} of its exclusive throughput")
        # Where that idle time lies decides whether time sharing can use it: a gap shorter than a BE
        # kernel (or than the gate's idle grace) cannot be filled without delaying HP.
        hp = excl_hp.get("hp") or {}
        steps = hp.get("steps") or {}
        n = (steps.get("decode_steps") or 0) + (steps.get("prefill_steps") or 0)
        wall, gpu = _get(hp, "window", "seconds"), hp.get("gpu_busy_s")
        if n and wall and gpu is not None:
            notes.append(f"that idle time comes in gaps of {(wall - gpu) / n * 1e3:.3f} ms on average, "
                         f"one between each two of HP's {n} GPU steps")
    return {
        "date": meta.get("date"),
        "label": meta.get("label"),
        "commit": meta.get("commit"),
        "config": meta.get("config"),
        "gpu": _get(meta, "gpu", "name"),
        "driver_version": _get(meta, "gpu", "driver_version"),
        "gpu_count": meta.get("gpu_count"),  # the node's GPUs (nvidia-smi)
        "gpus_used": meta.get("gpus_used"),
        "hp_gpu": meta.get("hp_gpu"),
        "be_gpus": meta.get("be_gpus"),
        "be_world_size": world,
        "nccl_version": nccl_v,
        "torch_version": torch_v,
        "load": meta.get("load"),
        # The HP's request lengths (fixed, azure-conv, azure-code) and arrival seed: None in a run
        # from before they were recorded (fixed lengths, seed 1).
        "lengths": meta.get("lengths") or (hp_cfg or {}).get("lengths"),
        "seed": meta.get("seed") if meta.get("seed") is not None else (hp_cfg or {}).get("seed"),
        "params_b": meta.get("params_b"),
        "load_step": step,
        "capacity_rps": raw.get("capacity_rps"),
        "hp_rate_rps": raw.get("hp_rate_rps"),
        "workload": {"kind": meta.get("workload"), "be": meta.get("be"), "hp": hp_cfg, "be_config": be_cfg},
        "min_requests": min_req,
        "min_requests_ok": all_ok,
        "hp_busy_fraction": busy,
        "exclusive_reference": excl_ref,
        "method": method(meta, excl_ref, excl_hp),
        # Issue #56's method v2 and its SLO headline (method_v2.py): "method" "v2" or "point".
        "paired": paired,
        "paired_seeds": meta.get("paired_seeds"),
        "wall_s": meta.get("wall_s"),
        "interrupted": meta.get("interrupted"),
        "notes": notes,
        "modes": rows,
    }


HEADLINE_FIELDS = ("method", "pairs", "upper95", "bound_upper95", "met", "attainment", "hp_goodput_vs_alone",
                   "aggregate", "aggregate_vs_best_baseline", "aggregate_per_gpu_vs_dedicated")


def with_paired(rows: list, paired: dict, be_unit) -> list:
    """The summary's rows with method v2's verdicts. A run by --paired-seeds gets one row per
    co-located mode by its own name (after its per-seed rows): its ratios the means over the included
    pairs of the ratios to the same seed's alone run, BE the mean, and the fields of HEADLINE_FIELDS;
    a run without gets those fields on its co-located rows (one pair: a point check)."""
    per_mode = paired.get("modes") or {}

    def headline(m: dict) -> dict:
        return {"method": m["method"], "pairs": m["pairs"], "upper95": m["upper95"],
                "bound_upper95": m["bound_upper95"], "met": m["met"], "slo_attainment": m["attainment"],
                "hp_goodput_vs_alone": m["hp_goodput_vs_alone"], "aggregate": m["aggregate"],
                "aggregate_vs_best_baseline": m["aggregate_vs_best_baseline"],
                "aggregate_per_gpu_vs_dedicated": m["aggregate_per_gpu_vs_dedicated"]}
    if not paired.get("paired"):
        for r in rows:
            if r["mode"] in per_mode:
                r.update(headline(per_mode[r["mode"]]))
        return rows
    by_name = {r["mode"]: r for r in rows}
    out = list(rows)
    for base, m in per_mode.items():
        runs = [by_name[n] for n in m["runs"] if n in by_name]
        mean = m["mean"]
        row = {"mode": base, "status": "ok" if m["pairs"] else "error",
               "error": None if m["pairs"] else "no included pair measured it",
               "hp_p50_ms": None, "hp_p99_ms": None, "hp_ttft_p50_ms": None, "hp_ttft_p99_ms": None,
               "hp_tpot_p50_ms": None, "hp_tpot_p99_ms": None, "hp_ttft_admit_p99_ms": None,
               "hp_p99_vs_exclusive": _mean([r.get("hp_p99_vs_exclusive") for r in runs]),
               "hp_ttft_p99_vs_exclusive": mean["ttft"], "hp_ttft_admit_p99_vs_exclusive": mean["ttft_admit"],
               "hp_tpot_p99_vs_exclusive": mean["tpot"],
               "hp_mean_decode_batch": _mean([r.get("hp_mean_decode_batch") for r in runs]),
               "hp_requests": None, "be_throughput": _mean([r.get("be_throughput") for r in runs]),
               "be_unit": be_unit, "be_vs_exclusive": m["be_vs_alone"],
               "hp_busy_fraction": runs[0].get("hp_busy_fraction") if runs else None,
               "hp_unfinished": None, "hp_requests_ok": None, "notes": [],
               "hp_p99_vs_exclusive_ci95": None, "hp_ttft_p99_vs_exclusive_ci95": None,
               "hp_ttft_admit_p99_vs_exclusive_ci95": None, "hp_tpot_p99_vs_exclusive_ci95": None,
               "budget": _budget(base), "runs": m["runs"]}
        row.update(headline(m))
        # A latency budget is held by method v2's bound: the upper end over the pairs.
        row["hp_slo_ok"] = None if row["budget"] is None or m["bound_upper95"] is None else \
            m["bound_upper95"] <= row["budget"]
        out.append(row)
    return out


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _group(name: str) -> str:
    """gpuos-time / gpuos-space for the latency-budget modes, gpuos for other gpuos modes, else baseline."""
    if not name.startswith("gpuos-"):
        return "baseline"
    return "gpuos-" + name.split("-")[1] if _budget(name) is not None else "gpuos"


def frontier(s: dict) -> dict:
    """frontier.json: BE throughput against HP's slowdown (hp_slowdown) for every co-located mode,
    and per latency budget B the gpuos modes of that B against every baseline that meets the same
    bound: a gpuos mode dominates when it meets the bound and gives BE at least as much as each of
    them."""
    points = []
    from_admission = (s.get("load") or 0.0) >= method_v2.ADMIT_FROM_LOAD
    for r in common.run_modes(s):
        if r["mode"].startswith("exclusive-"):
            continue
        points.append({"mode": r["mode"], "group": _group(r["mode"]), "budget": r.get("budget"),
                       "hp_slowdown": hp_slowdown(r, from_admission), "be_vs_exclusive": r.get("be_vs_exclusive")})
    measured = [p for p in points if p["hp_slowdown"] is not None and p["be_vs_exclusive"] is not None]
    budgets = []
    for b in sorted({p["budget"] for p in points if p["budget"] is not None}):
        base = [p for p in measured if p["group"] == "baseline" and p["hp_slowdown"] <= b]
        best = max((p["be_vs_exclusive"] for p in base), default=None)
        gp = []
        for p in points:
            if p["budget"] != b:
                continue
            meets = p["hp_slowdown"] is not None and p["be_vs_exclusive"] is not None and p["hp_slowdown"] <= b
            gp.append({**p, "meets_bound": meets,
                       "dominates": meets and (best is None or p["be_vs_exclusive"] >= best)})
        budgets.append({"budget": b, "gpuos": gp, "baselines_meeting_bound": base, "best_baseline_be": best})
    verdicts = [g["dominates"] for e in budgets for g in e["gpuos"]]
    ttft_key = "hp_ttft_admit_p99_vs_exclusive" if from_admission else "hp_ttft_p99_vs_exclusive"
    return {"y": f"hp_slowdown = max({ttft_key}, hp_tpot_p99_vs_exclusive)",
            "x": "be_vs_exclusive", "points": points, "budgets": budgets,
            "all_dominate": all(verdicts) if verdicts else None}


def _with_ci(r: dict, key: str) -> str:
    """A ratio's table cell: the value, and its 95% interval where there is one ("1.20 [1.10, 1.31]")."""
    ci = r.get(key + "_ci95")
    v = common.fmt(r.get(key))
    if not ci:
        return v
    return f"{v} [{common.fmt(ci[0])}, {'inf' if ci[1] is None else common.fmt(ci[1])}]"


def reference_lines(s: dict) -> list:
    """summary.md's lines on the exclusive reference, with more than one exclusive-hp run."""
    ref, m = s.get("exclusive_reference") or {}, s.get("method") or {}
    if (ref.get("n") or 0) < 2:
        return []
    f = common.fmt
    out = [f"- HP alone measured {ref['n']} times, interleaved with the other modes ({', '.join(ref['runs'])}); "
           "every ratio / excl is against their mean. [lo, hi]: " + CI_MEANING + "."]
    for k, st in (ref.get("metrics") or {}).items():
        if st and st.get("ci95"):
            out.append(f"- exclusive {k} ms: runs {', '.join(f(v) for v in st['values'])}; mean {f(st['mean'])}, "
                       f"sd {f(st['sd'])}, 95% CI of the mean [{f(st['ci95'][0])}, {f(st['ci95'][1])}]")
    out.append(f"- issue #40's method (>= {m.get('min_exclusive_runs')} exclusive runs, window >= "
               f"{m.get('min_window_s'):g} s): " + ("followed" if m.get("follows") else
               f"NOT followed ({m.get('exclusive_runs')} runs, window "
               + ("unknown)" if m.get("window_s") is None else f"{m['window_s']:g} s)")))
    return out


def _method_cell(m: dict) -> str:
    return "v2" if m.get("method") == "v2" else "POINT CHECK"


def headline_lines(s: dict) -> list:
    """summary.md's method v2 and SLO headline section (method_v2.py)."""
    pr = s.get("paired") or {}
    modes = pr.get("modes") or {}
    if not modes:
        return []
    f = common.fmt
    slo = pr.get("slo") or {}
    out = ["", f"## Aggregate at the SLO ({'method v2' if pr.get('method') == 'v2' else 'POINT CHECK'})", ""]
    if pr.get("paired"):
        bs = pr.get("bootstrap") or {}
        rule = pr.get("outlier_rule") or {}
        out.append(f"Paired seeds {', '.join(map(str, pr.get('seeds') or []))}: per seed HP alone then every "
                   f"co-located mode. Ratios: co-located p99 / the same seed's alone p99; upper95: the one-sided "
                   f"{bs.get('quantile', 0.95):.0%} bootstrap bound of their mean ({bs.get('resamples')} resamples, "
                   f"RNG seed {bs.get('rng_seed')}); a headline claim needs >= {pr.get('min_pairs')} pairs, fewer "
                   f"is a POINT CHECK. Outlier rule: a pair whose calibration replay's TPOT p50 is off the run's "
                   f"median ({f(rule.get('median_ms'))} ms) by more than {rule.get('tolerance', 0):.0%} is excluded.")
    else:
        out.append("One run per mode (no --paired-seeds): every verdict below is a POINT CHECK.")
    out.append(f"SLO per request: TTFT (from arrival) <= {slo.get('budget'):g} x alone TTFT p99 and TPOT <= "
               f"{slo.get('budget'):g} x alone TPOT p99 (the same seed's). HP goodput counts only at attainment >= "
               f"{slo.get('attainment_target', 0.99):.0%} (else 0). Aggregate = HP goodput / alone + BE / alone; "
               f"best baseline: {(pr.get('best_baseline') or {}).get('mode')} "
               f"({f((pr.get('best_baseline') or {}).get('aggregate'))}); dedicated GPUs: "
               f"{f(pr.get('dedicated_per_gpu'))} per GPU. TTFT bound from {pr.get('ttft_bound_from')}.")
    out += ["", "| mode | method | pairs | TTFT up95 | TTFT adm up95 | TPOT up95 | bound | attainment | "
                "HP goodput / alone | BE / alone | aggregate | / best baseline | per GPU / dedicated |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for base, m in modes.items():
        up = m.get("upper95") or {}
        out.append(f"| {base} | {_method_cell(m)} | {m.get('pairs')} | {f(up.get('ttft'))} | "
                   f"{f(up.get('ttft_admit'))} | {f(up.get('tpot'))} | {f(m.get('bound_upper95'))} | "
                   f"{f(m.get('attainment'))} | {f(m.get('hp_goodput_vs_alone'))} | {f(m.get('be_vs_alone'))} | "
                   f"{f(m.get('aggregate'))} | {f(m.get('aggregate_vs_best_baseline'))} | "
                   f"{f(m.get('aggregate_per_gpu_vs_dedicated'))} |")
    for e in pr.get("excluded") or []:
        out.append(f"- excluded pair, seed {e['seed']} ({e['alone']}): {e['reason']}")
    return out


def markdown(s: dict) -> str:
    f = common.fmt
    out = [f"# Co-location results: {s.get('label')} ({s.get('date')})", ""]
    out.append(f"Commit {s.get('commit')}.")
    out.append(f"GPU {s.get('gpu')}, driver {s.get('driver_version')}, torch {s.get('torch_version')}. "
               f"HP load {s.get('load')} of capacity {f(s.get('capacity_rps'))} req/s "
               f"= {f(s.get('hp_rate_rps'))} req/s offered.")
    if s.get("be_gpus"):
        out.append(f"Node of {s.get('gpu_count')} GPUs; HP on GPU {s.get('hp_gpu')}, BE data-parallel over GPUs "
                   f"{','.join(map(str, s['be_gpus']))} ({s.get('be_world_size')} ranks), NCCL "
                   f"{s.get('nccl_version')}.")
    wl = s.get("workload") or {}
    hp = wl.get("hp") or {}
    model = hp.get("model") or {}
    if model:
        shape = (f"prompt {hp.get('prompt')}, {hp.get('out_tokens')} output tokens"
                 if hp.get("lengths") in (None, "fixed") else
                 f"lengths {hp.get('lengths')} (prompts up to {hp.get('max_prompt')}, outputs up to "
                 f"{hp.get('max_out')} tokens)")
        out.append(f"HP: Llama-shaped {model.get('params', 0) / 1e9:.2f}B ({model.get('layers')} layers, "
                   f"hidden {model.get('hidden')}), {shape}, max batch {hp.get('max_batch')}, "
                   f"CUDA graphs {hp.get('cuda_graphs')}, arrival seed {hp.get('seed', s.get('seed'))}.")
    bec = wl.get("be_config") or {}
    if bec:
        out.append("BE (" + str(wl.get("be")) + "): " + ", ".join(f"{k} {v}" for k, v in bec.items()
                                                               if not isinstance(v, dict)) + ".")
    out.append("")
    out.append("| mode | HP p50 ms | HP p99 ms | p99 / excl | TTFT p99 ms | TPOT p99 ms | TTFT p99/excl "
               "| TTFT adm p99/excl | TPOT p99/excl | decode batch | budget | HP requests | BE throughput "
               "| BE / excl | status |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in s.get("modes", []):
        be = f(r["be_throughput"]) + (f" {r['be_unit']}" if r["be_throughput"] is not None else "")
        st = r.get("status") or ""
        if r.get("error"):
            st += ": " + str(r["error"]).replace("|", "/").replace("\n", " ")[:120]
        bud = "-" if r.get("budget") is None else (
            f"{r['budget']:g}" + {True: " met", False: " MISSED", None: ""}[r.get("hp_slo_ok")])
        out.append(f"| {r['mode']} | {f(r['hp_p50_ms'])} | {f(r['hp_p99_ms'])} | "
                   f"{_with_ci(r, 'hp_p99_vs_exclusive')} | {f(r['hp_ttft_p99_ms'])} | {f(r['hp_tpot_p99_ms'])} | "
                   f"{_with_ci(r, 'hp_ttft_p99_vs_exclusive')} | {_with_ci(r, 'hp_ttft_admit_p99_vs_exclusive')} | "
                   f"{_with_ci(r, 'hp_tpot_p99_vs_exclusive')} | {f(r.get('hp_mean_decode_batch'))} | {bud} | "
                   f"{f(r['hp_requests'])} | {be} | {f(r['be_vs_exclusive'])} | {st} |")
    out.append("")
    for e in frontier(s)["budgets"]:
        for g in e["gpuos"]:
            if g["hp_slowdown"] is None or g["be_vs_exclusive"] is None:
                out.append(f"- frontier at {e['budget']:g}x: {g['mode']} not measured")
                continue
            out.append(f"- frontier at {e['budget']:g}x: {g['mode']} "
                       + ("dominates" if g["dominates"] else "does not dominate")
                       + f" (BE {f(g['be_vs_exclusive'])} of exclusive at {f(g['hp_slowdown'])}x; "
                       + f"best baseline within {e['budget']:g}x: {f(e['best_baseline_be'])})")
    out += reference_lines(s)
    out += headline_lines(s)
    st = s.get("load_step")
    if st:
        out.append(f"- load step: HP from {s.get('load')} to {st.get('to')} of capacity {f(st.get('at_s'))} s "
                   "into the window; latency per 1 s window after it in summary.json (hp_windows)")
        for r in s.get("modes", []):
            if "hp_step_ok" not in r:
                continue
            if r["hp_step_ok"] is None:
                out.append(f"- load step, {r['mode']}: not checked (no windows to compare with exclusive-hp's)")
                continue
            verdict = "within" if r["hp_step_ok"] else "NOT within"
            out.append(f"- load step, {r['mode']}: {verdict} {r['budget']:g}x exclusive in every 1 s window "
                       f"after the step ({r['hp_step_windows_skipped']} windows with < {STEP_MIN_REQUESTS} "
                       "requests skipped)")
    for n in s.get("notes", []):
        out.append(f"- {n}")
    for r in s.get("modes", []):
        for n in r.get("notes") or []:
            out.append(f"- {r['mode']}: {n}")
    if s.get("interrupted"):
        out.append(f"- run interrupted: {s['interrupted']}")
    out.append("")
    return "\n".join(out)


def _save(fig, plt, out_dir: str, name: str) -> str:
    """Writes a finished figure as out_dir/name and closes it; its path."""
    fig.tight_layout()
    p = os.path.join(out_dir, name)
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p


def plot(raw: dict, s: dict, out_dir: str) -> list:
    """cdf.png, be.png and frontier.png; returns the files written (none without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[report] matplotlib missing: no plots", file=sys.stderr)
        return []
    written = []
    modes = raw.get("modes", {})
    fig, ax = plt.subplots(figsize=(8, 5))
    any_line = False
    for r in s["modes"]:
        hp = (modes.get(r["mode"]) or {}).get("hp") or {}
        pts = hp.get("e2e_cdf_ms")
        if pts:
            n = len(pts)
            ys = [i / (n - 1) if n > 1 else 1.0 for i in range(n)]
            ax.plot(pts, ys, label=f"{r['mode']} (p99 {common.fmt(r['hp_p99_ms'])} ms)")
            any_line = True
        elif r["hp_p50_ms"] is not None:
            e = hp.get("e2e_ms") or {}
            xs = [e.get(k) for k in ("p50", "p90", "p99", "max")]
            ys = [0.5, 0.9, 0.99, 1.0]
            xy = [(x, y) for x, y in zip(xs, ys) if x is not None]
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o",
                    label=f"{r['mode']} (p50/p90/p99/max)")
            any_line = True
    if any_line:
        ax.set_xscale("log")
    ax.set_xlabel("HP end-to-end latency (ms, log)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.01)
    ax.axhline(0.99, color="grey", lw=0.5, ls=":")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"HP latency CDF per mode (load {s.get('load')}, {s.get('gpu')})")
    if any_line:
        ax.legend(fontsize=8, loc="lower right")
    written.append(_save(fig, plt, out_dir, "cdf.png"))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    be_rows = [r for r in s["modes"] if r["be_vs_exclusive"] is not None]
    names = [r["mode"] for r in be_rows]
    vals = [r["be_vs_exclusive"] for r in be_rows]
    bars = ax.bar(range(len(vals)), vals, color="tab:blue")
    for b, r in zip(bars, be_rows):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{common.fmt(r['be_throughput'])}",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(vals)))
    ax.set_xticklabels(names, rotation=20, ha="right")
    busy = s.get("hp_busy_fraction")
    if busy is not None:
        ax.axhline(1 - busy, color="tab:red", ls="--",
                   label=f"1 - hp_busy_fraction = {1 - busy:.2f} (BE using all of HP's idle time)")
        ax.legend(fontsize=8)
    unit = next((r["be_unit"] for r in be_rows if r["be_unit"]), "")
    ax.set_ylabel(f"BE throughput / exclusive (bar labels: {unit})")
    ax.set_ylim(0, max([1.35] + [v * 1.25 for v in vals]))
    ax.set_title("BE throughput per mode")
    ax.grid(True, axis="y", alpha=0.3)
    written.append(_save(fig, plt, out_dir, "be.png"))
    written.append(plot_frontier(s, frontier(s), out_dir, plt))
    p = plot_slo_frontier(s, out_dir, plt)
    if p:
        written.append(p)
    return written


def plot_slo_frontier(s: dict, out_dir: str, plt) -> Optional[str]:
    """slo_frontier.png: the headline of issue #56 (method_v2.py): every co-located mode (each
    variant by its name) at x = BE / alone, y = HP goodput at the SLO / alone, with the spread over
    its pairs as bars; lines of equal aggregate at dedicated GPUs' 1.0 per GPU and at the best
    baseline's. None: no mode has both numbers."""
    pr = s.get("paired") or {}
    modes = {b: m for b, m in (pr.get("modes") or {}).items()
             if m.get("be_vs_alone") is not None and m.get("hp_goodput_vs_alone") is not None}
    if not modes:
        return None
    fig, ax = plt.subplots(figsize=(8, 6))
    marks = ["o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">"]
    for i, (base, m) in enumerate(sorted(modes.items())):
        inc = [e["modes"][base] for e in pr.get("pairs") or [] if e.get("included") and base in e["modes"]]
        xs = [x["be_vs_alone"] for x in inc if x.get("be_vs_alone") is not None]
        ys = [x["hp_goodput_vs_alone"] for x in inc if x.get("hp_goodput_vs_alone") is not None]
        x, y = m["be_vs_alone"], m["hp_goodput_vs_alone"]
        xerr = [[x - min(xs)], [max(xs) - x]] if len(xs) > 1 else None
        yerr = [[y - min(ys)], [max(ys) - y]] if len(ys) > 1 else None
        label = f"{base} ({'v2' if m.get('method') == 'v2' else 'point'}, {m.get('pairs')} pair(s), " \
                f"aggregate {common.fmt(m.get('aggregate'))})"
        ax.errorbar([x], [y], xerr=xerr, yerr=yerr, marker=marks[i % len(marks)], ls="", ms=8, capsize=3,
                    mfc="none" if base.startswith("gpuos-") else None, label=label)
    ax.plot([0.0], [1.0], marker="*", color="black", ls="", ms=10, label="exclusive (HP alone, BE not run: 1.0)")
    best = pr.get("best_baseline") or {}
    for level, text, style in ((pr.get("dedicated_per_gpu") or 1.0, "dedicated GPUs (1.0 per GPU)", ":"),
                               (best.get("aggregate"), f"best baseline: {best.get('mode')}", "--")):
        if level:
            ax.plot([0, level], [level, 0], color="grey", lw=0.8, ls=style, label=f"aggregate {level:.2f}: {text}")
    ax.set_xlim(0, max([1.1] + [m["be_vs_alone"] * 1.1 for m in modes.values()]))
    ax.set_ylim(0, max([1.1] + [m["hp_goodput_vs_alone"] * 1.1 for m in modes.values()]))
    ax.set_xlabel("BE throughput / alone")
    ax.set_ylabel(f"HP goodput at the SLO / alone (0 below {(pr.get('slo') or {}).get('attainment_target', 0.99):.0%} "
                  "attainment)")
    slo = pr.get("slo") or {}
    ax.set_title(f"Aggregate at the SLO ({'method v2' if pr.get('method') == 'v2' else 'point check'}; "
                 f"B {slo.get('budget')}, load {s.get('load')}, {s.get('gpu')})", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return _save(fig, plt, out_dir, "slo_frontier.png")


def slo_line_label(grp: str, line: list, variant: str) -> str:
    """The legend's name of one slo line: its modes' common name with their budgets, e.g.
    gpuos-space-slo-1.5@nog, gpuos-time-slo-{1.25,1.5} (label: B)."""
    bs = [f"{p['budget']:g}" for p in line]
    b = bs[0] if len(bs) == 1 else "{" + ",".join(bs) + "}"
    return f"{grp}-slo-{b}" + (f"@{variant}" if variant else "") + ("" if len(bs) == 1 else " (label: B)")


def plot_frontier(s: dict, fr: dict, out_dir: str, plt) -> str:
    """frontier.png: BE throughput (x) against HP's slowdown (y, log), one point per co-located
    mode; the latency-budget modes joined per kind (labelled with their B), a dotted line at each
    budget. With budgets the y axis stops at 4x the largest: a point above it (a baseline 100x
    slower) sits on the top edge with its value in its label, so the budgets stay readable."""
    fig, ax = plt.subplots(figsize=(8, 6))
    pts = [p for p in fr["points"] if p["hp_slowdown"] is not None and p["be_vs_exclusive"] is not None]
    budgets = [e["budget"] for e in fr["budgets"]]
    ys = [p["hp_slowdown"] for p in pts] + budgets + [1.0]
    lo, hi = min(ys) / 1.05, max(ys) * 1.1
    if budgets:
        hi = min(hi, 4 * max(budgets))

    def y(p):
        return min(p["hp_slowdown"], hi / 1.03)
    colors = {"gpuos-time": "tab:blue", "gpuos-space": "tab:orange"}
    variant_marks = ["o", "s", "D", "^", "v", "P"]
    for grp in ("gpuos-time", "gpuos-space"):
        # One line per gpuosd config (the default, and each @variant), named in the legend with its
        # budgets, e.g. gpuos-space-slo-1.5@nog.
        variants = sorted({common.split_variant(p["mode"])[1] or "" for p in pts if p["group"] == grp})
        for i, v in enumerate(variants):
            line = sorted((p for p in pts if p["group"] == grp and (common.split_variant(p["mode"])[1] or "") == v),
                          key=lambda p: p["budget"])
            ax.plot([p["be_vs_exclusive"] for p in line], [y(p) for p in line],
                    marker=variant_marks[i % len(variant_marks)], ls="-" if not v else "--",
                    color=colors[grp], label=slo_line_label(grp, line, v))
    # Baselines each with their own marker and a colour the two gpuos lines do not use.
    marks = ["s", "^", "v", "D", "P", "X", "*", "h"]
    shades = ["tab:green", "tab:red", "tab:purple", "tab:brown", "tab:gray", "tab:olive"]
    n_base = 0
    for p in pts:
        if p["group"] == "baseline":
            ax.plot(p["be_vs_exclusive"], y(p), marker=marks[n_base % len(marks)],
                    color=shades[n_base % len(shades)], ls="", ms=8, label=p["mode"])
            n_base += 1
        elif p["group"] == "gpuos":
            ax.plot(p["be_vs_exclusive"], y(p), marker="o", mfc="none", color="black", ls="", ms=8,
                    label=p["mode"])
        text = p["mode"].replace("gpuos-", "")
        if p["budget"] is not None:
            v = common.split_variant(p["mode"])[1]
            text = f"{p['budget']:g}" + (f"@{v}" if v else "")
        if p["hp_slowdown"] > y(p):
            text += f" ({common.fmt(p['hp_slowdown'])}x)"
        # time labels above, space labels below their line: the two lines often run close.
        off = (4, -11) if p["group"] == "gpuos-space" else (4, 4)
        ax.annotate(text, (p["be_vs_exclusive"], y(p)), textcoords="offset points", xytext=off, fontsize=7)
    for b in budgets:
        ax.axhline(b, color="grey", lw=0.8, ls=":")
    ax.axhline(1.0, color="black", lw=0.5)
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    # Plain numbers at the budgets and a few round slowdowns: a log axis' 10^k labels say nothing here.
    ticks = sorted({t for t in [1, 2, 3, 5, 10, 20, 50, 100, 1000, 10000] + budgets if lo <= t <= hi})
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlim(0, max([1.05] + [p["be_vs_exclusive"] * 1.1 for p in pts]))
    ax.set_xlabel("BE throughput / exclusive")
    ttft = "TTFT from admission" if "admit" in fr.get("y", "") else "TTFT"
    ax.set_ylabel(f"HP slowdown: max({ttft} p99, TPOT p99) / exclusive (log)")
    ax.set_title(f"Latency budget frontier (load {s.get('load')}, {s.get('gpu')})")
    ax.grid(True, alpha=0.3)
    if pts:
        ax.legend(fontsize=7, loc="upper left")
    return _save(fig, plt, out_dir, "frontier.png")


def write_all(raw: dict, out_dir: str, plots: bool = True) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    s = build_summary(raw)
    common.write_json_atomic(os.path.join(out_dir, "summary.json"), s)
    common.write_json_atomic(os.path.join(out_dir, "frontier.json"), frontier(s))
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(markdown(s))
    if plots:
        plot(raw, s, out_dir)
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", help="raw.json written by run_matrix.py")
    ap.add_argument("--out", default="", help="output folder (default: raw.json's folder)")
    ap.add_argument("--no-plots", action="store_true")
    a = ap.parse_args()
    raw = common.read_json(a.raw)
    if raw is None:
        print(f"cannot read {a.raw}", file=sys.stderr)
        return 1
    out = a.out or os.path.dirname(os.path.abspath(a.raw))
    s = write_all(raw, out, plots=not a.no_plots)
    print(markdown(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
