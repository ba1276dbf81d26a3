# SPDX-License-Identifier: Apache-2.0
"""Issue #56's method v2 and its headline (items 6 and 5), from a run's raw results; no process,
no GPU. report.py puts what this returns in summary.json ("paired") and summary.md; zoo_table.py in
zoo.md / zoo.json.

Method v2 (run_matrix.py --paired-seeds S1,S2,S3): per arrival seed s, HP alone with seed s
(exclusive-hp+s<s>, after a short calibration replay) and then every co-located mode with seed s
(<mode>+s<s>), back to back: a pair per seed and mode. Per pair and metric (TTFT p99, TTFT from
admission p99, TPOT p99) the ratio co-located / alone of the same seed. A bound B holds for a mode
when the one-sided 95% upper bound over its pairs is <= B: the 95th percentile of the means of
BOOTSTRAP_RESAMPLES resamples (with replacement, of as many ratios as there are pairs) drawn with
a fixed RNG seed (BOOTSTRAP_RNG_SEED), so a run's verdict is reproducible. A mode with at least
MIN_PAIRS included pairs is a headline claim ("method": "v2"); fewer is a "point" check.

The outlier rule, fixed before any run and on an independent signal, never on a measured metric:
each pair's alone run first replays --pair-calibrate-s seconds of its own arrivals (hp_server.py
--calib-replay-s); a pair whose replay's TPOT p50 is off the median of all the run's replays by more
than CALIBRATION_TOLERANCE (relative) is excluded, and listed with its value; so is a pair whose
alone run has no replay when others have one. A run without replays (--pair-calibrate-s 0, or one
from before) excludes none.

The headline (item 5), comparable with LithOS: aggregate throughput at the SLO.
  SLO, per request: TTFT (from arrival) <= SLO_BUDGET x the same seed's alone TTFT p99, and TPOT
      <= SLO_BUDGET x the same seed's alone TPOT p99 (a request of one output token has no TPOT: its
      TTFT decides). An unfinished request misses. (Why these: README.md, "The headline".)
  attainment: the share of the window's requests (every arrival, finished or not) that meet it.
  HP goodput: the requests that meet the SLO per second of the arrival window, counted only when
      attainment >= ATTAINMENT_TARGET; below it HP goodput is 0 (the mode does not serve HP at its
      SLO), and the raw rate of good requests stays in "good_rps".
  HP goodput / alone: over the good rate of the same seed's alone run (the same arrivals).
  BE / alone: BE's throughput over exclusive-be's.
  aggregate = HP goodput / alone + BE / alone. The run's own baselines (exclusive: 1 + 0 = 1.0; MPS,
      MPS priority 1 at N% threads, time-slicing: theirs) give the best baseline; dedicated GPUs, each
      job alone on its own GPU, make 1 + 1 = 2 jobs' worth on 2 GPUs: DEDICATED_PER_GPU = 1.0 per GPU,
      which a co-located aggregate (one GPU) beats when it is above 1.
A run without --paired-seeds is one pair (its seed; alone = exclusive-hp) and a point check.
"""
from __future__ import annotations

import math
import random
import statistics
from typing import Dict, List, Optional, Sequence

import common

# --- the method's constants, fixed before any run (one place) ------------------------------------
CALIBRATION_TOLERANCE = 0.10   # a pair is excluded when its calibration TPOT p50 is off the median by more
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_RNG_SEED = 56        # issue #56
UPPER_QUANTILE = 0.95          # one-sided 95% upper bound
MIN_PAIRS = common.V2_MIN_PAIRS
# --- the headline's SLO ---------------------------------------------------------------------------
SLO_BUDGET = 1.5               # the zoo's B: per request TTFT and TPOT <= B x the same seed's alone p99
ATTAINMENT_TARGET = 0.99
DEDICATED_PER_GPU = 1.0        # each job on its own GPU: (1 + 1) jobs' worth / 2 GPUs
# TTFT's bound counts from admission at loads >= this, from arrival below (zoo_table.py, check_budgets.py)
ADMIT_FROM_LOAD = 0.5

# Per metric: the p99 in HP's result (hp_server.py's JSON).
METRICS = {"ttft": "ttft_ms", "ttft_admit": "ttft_admit_ms", "tpot": "tpot_ms"}


def _get(d, *path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def upper95(values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, rng_seed: int = BOOTSTRAP_RNG_SEED,
            q: float = UPPER_QUANTILE) -> Optional[float]:
    """The one-sided upper bound at q of the mean of `values` by the percentile bootstrap: the
    ceil(q x resamples)-th smallest of `resamples` means of len(values) draws with replacement, from
    random.Random(rng_seed). One value: itself. None: no values."""
    v = [float(x) for x in values if x is not None]
    if not v:
        return None
    if len(v) == 1:
        return v[0]
    rng = random.Random(rng_seed)
    n = len(v)
    means = sorted(sum(rng.choices(v, k=n)) / n for _ in range(resamples))
    return means[max(0, math.ceil(q * resamples) - 1)]


def calibration_outliers(calibs: Dict[int, Optional[float]], tol: float = CALIBRATION_TOLERANCE) -> dict:
    """The outlier rule over a run's pairs: calibs = {seed: its calibration replay's TPOT p50 (None:
    no replay)}. {"median_ms", "tolerance", "excluded": {seed: reason}}. No replay in the run: none
    excluded, median None."""
    have = {s: v for s, v in calibs.items() if v is not None}
    if not have:
        return {"median_ms": None, "tolerance": tol, "excluded": {}}
    med = statistics.median(have.values())
    excluded = {}
    for s, v in calibs.items():
        if v is None:
            excluded[s] = "no calibration replay (the rule cannot vouch for this pair)"
        elif med > 0 and abs(v - med) / med > tol:
            excluded[s] = (f"calibration TPOT p50 {v:.4g} ms is {abs(v - med) / med:.1%} off the run's median "
                           f"{med:.4g} ms (> {tol:.0%})")
    return {"median_ms": med, "tolerance": tol, "excluded": excluded}


def attainment(log: Optional[dict], slo_ttft_ms: Optional[float], slo_tpot_ms: Optional[float]) -> Optional[dict]:
    """{requests, good, attainment} of a request_log (hp_server.py: arrival_s, ttft_ms, tpot_ms per
    request, None latencies = unfinished) against the SLO; None without a log or an SLO."""
    if not log or slo_ttft_ms is None or slo_tpot_ms is None:
        return None
    ttft, tpot = log.get("ttft_ms") or [], log.get("tpot_ms") or []
    n = len(ttft)
    good = 0
    for i in range(n):
        f = ttft[i]
        p = tpot[i] if i < len(tpot) else None
        if f is None:
            continue  # unfinished
        if f <= slo_ttft_ms and (p is None or p <= slo_tpot_ms):
            good += 1
    return {"requests": n, "good": good, "attainment": good / n if n else None}


def slo_of(alone_hp: dict, budget: float = SLO_BUDGET) -> Optional[dict]:
    """The SLO a seed's requests are held to: budget x its alone run's TTFT p99 and TPOT p99."""
    f, p = _get(alone_hp, "ttft_ms", "p99"), _get(alone_hp, "tpot_ms", "p99")
    if f is None or p is None:
        return None
    return {"ttft_ms": budget * f, "tpot_ms": budget * p}


def _window_s(hp: dict, window_s: Optional[float]) -> Optional[float]:
    return window_s or _get(hp, "window", "seconds")


def served(hp: dict, slo: Optional[dict], window_s: Optional[float]) -> dict:
    """A run's HP at the SLO: attainment, good_rps (requests meeting it per second of the window)
    and goodput_rps (good_rps when attainment >= ATTAINMENT_TARGET, else 0)."""
    a = attainment(hp.get("request_log"), *(slo["ttft_ms"], slo["tpot_ms"]) if slo else (None, None))
    w = _window_s(hp, window_s)
    if a is None or a["attainment"] is None or not w:
        return {"attainment": None, "requests": None, "good": None, "good_rps": None, "goodput_rps": None}
    good_rps = a["good"] / w
    return {**a, "good_rps": good_rps, "goodput_rps": good_rps if a["attainment"] >= ATTAINMENT_TARGET else 0.0}


def is_baseline(base: str) -> bool:
    return not base.startswith("gpuos-") and not base.startswith("exclusive-")


def pairs_of(meta: dict, modes: dict) -> List[dict]:
    """The run's pairs: [{seed, alone: mode name, colocated: {base: mode name}}]. --paired-seeds:
    one per seed; else one, exclusive-hp with the run's seed beside the co-located modes."""
    names = [n for n in (meta.get("modes_planned") or list(modes))]
    seeds = meta.get("paired_seeds")
    if seeds:
        out = []
        for s in seeds:
            co = {}
            for n in names:
                base, sd = common.split_seed(n)
                if sd == s and not base.startswith("exclusive-"):
                    co[base] = n
            out.append({"seed": s, "alone": common.seed_name("exclusive-hp", s), "colocated": co})
        return out
    co = {n: n for n in names if not n.startswith("exclusive-") and common.split_seed(n)[1] is None}
    seed = meta.get("seed") if meta.get("seed") is not None else 1
    return [{"seed": seed, "alone": "exclusive-hp", "colocated": co}]


def analyse(meta: dict, modes: dict, budget: float = SLO_BUDGET) -> dict:
    """summary.json's "paired": the pairs, the outlier rule's verdicts, and per co-located mode
    (its base name) the ratios, their means and bootstrap upper bounds, the bound, and the SLO
    headline (attainment, HP goodput / alone, BE / alone, aggregate, against the best baseline and
    dedicated GPUs)."""
    load = meta.get("load") or 0.0
    window_s = meta.get("window_s")
    be_alone = _get(modes, "exclusive-be", "be_rate")
    pairs = pairs_of(meta, modes)
    v2 = bool(meta.get("paired_seeds"))
    calibs = {p["seed"]: _get(modes.get(p["alone"]), "hp", "calib_replay", "tpot_ms", "p50") for p in pairs}
    rule = calibration_outliers(calibs) if v2 else {"median_ms": None, "tolerance": CALIBRATION_TOLERANCE,
                                                    "excluded": {}}
    out_pairs, excluded = [], []
    per_mode: Dict[str, dict] = {}
    for p in pairs:
        alone_rec = modes.get(p["alone"]) or {}
        alone_hp = alone_rec.get("hp") or {}
        entry = {"seed": p["seed"], "alone": p["alone"], "calibration_tpot_p50_ms": calibs.get(p["seed"]),
                 "included": True, "reason": None, "modes": {}}
        why = rule["excluded"].get(p["seed"])
        if why is None and (alone_rec.get("status") not in (None, "ok") or not alone_hp):
            why = f"{p['alone']} not measured ({alone_rec.get('status') or 'missing'})"
        alone_p99 = {m: _get(alone_hp, k, "p99") for m, k in METRICS.items()}
        slo = slo_of(alone_hp, budget)
        alone_srv = served(alone_hp, slo, window_s) if alone_hp else served({}, None, None)
        entry.update({"alone_p99_ms": alone_p99, "slo_ms": slo, "alone_attainment": alone_srv["attainment"],
                      "alone_good_rps": alone_srv["good_rps"]})
        for base, name in p["colocated"].items():
            rec = modes.get(name) or {}
            hp = rec.get("hp") or {}
            ok = rec.get("status") in (None, "ok") and bool(hp)
            ratios = {m: (_get(hp, k, "p99") / alone_p99[m] if ok and _get(hp, k, "p99") is not None
                          and alone_p99[m] else None) for m, k in METRICS.items()}
            srv = served(hp, slo, window_s) if ok else served({}, None, None)
            hp_vs = (srv["goodput_rps"] / alone_srv["good_rps"]
                     if srv["goodput_rps"] is not None and alone_srv["good_rps"] else None)
            be = rec.get("be_rate") / be_alone if rec.get("be_rate") is not None and be_alone else None
            entry["modes"][base] = {"mode": name, "status": rec.get("status"), "ratios": ratios,
                                    "attainment": srv["attainment"], "good_rps": srv["good_rps"],
                                    "goodput_rps": srv["goodput_rps"], "hp_goodput_vs_alone": hp_vs,
                                    "be_vs_alone": be,
                                    "aggregate": None if hp_vs is None or be is None else hp_vs + be}
            per_mode.setdefault(base, {"pairs_planned": 0})
            per_mode[base]["pairs_planned"] += 1
        if why is not None:
            entry["included"], entry["reason"] = False, why
            excluded.append({"seed": p["seed"], "alone": p["alone"],
                             "calibration_tpot_p50_ms": calibs.get(p["seed"]), "reason": why})
        out_pairs.append(entry)
    for base, m in per_mode.items():
        m.update(mode_verdict(base, [e["modes"][base] for e in out_pairs if e["included"] and base in e["modes"]],
                              load, budget))
    best = best_baseline(per_mode)
    for base, m in per_mode.items():
        agg = m.get("aggregate")
        m["aggregate_vs_best_baseline"] = agg / best["aggregate"] if agg is not None and best["aggregate"] else None
        m["aggregate_per_gpu_vs_dedicated"] = None if agg is None else agg / DEDICATED_PER_GPU
    heads = [m["method"] for b, m in per_mode.items()]
    return {
        "method": "v2" if v2 and heads and all(h == "v2" for h in heads) else "point",
        "seeds": [p["seed"] for p in pairs], "paired": v2, "min_pairs": MIN_PAIRS,
        "bootstrap": {"statistic": "mean of the per-pair ratios co-located p99 / alone p99 (same seed)",
                      "resamples": BOOTSTRAP_RESAMPLES, "rng_seed": BOOTSTRAP_RNG_SEED, "quantile": UPPER_QUANTILE},
        "outlier_rule": {"signal": "calibration replay TPOT p50 (HP alone, its own arrivals, before the pair)",
                         "tolerance": CALIBRATION_TOLERANCE, "median_ms": rule["median_ms"],
                         "seconds": meta.get("pair_calibrate_s")},
        "excluded": excluded,
        "slo": {"budget": budget, "ttft": "from arrival <= budget x the same seed's alone TTFT p99",
                "tpot": "<= budget x the same seed's alone TPOT p99", "attainment_target": ATTAINMENT_TARGET,
                "below_target": "HP goodput 0 (good_rps keeps the raw rate)"},
        "ttft_bound_from": "admission" if load >= ADMIT_FROM_LOAD else "arrival",
        "best_baseline": best, "dedicated_per_gpu": DEDICATED_PER_GPU,
        "pairs": out_pairs, "modes": per_mode,
    }


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def mode_verdict(base: str, pairs: List[dict], load: float, budget: float) -> dict:
    """One co-located mode over its included pairs: ratios per metric (one per pair), their means
    and upper bounds, the bound (the larger of TPOT's and TTFT's, TTFT from admission at loads >=
    ADMIT_FROM_LOAD), met (gpuos and baselines alike on the upper bound; met_mean on the means), and
    the SLO headline's means."""
    ok = [p for p in pairs if p["status"] in (None, "ok")]
    ratios = {m: [p["ratios"][m] for p in ok if p["ratios"][m] is not None] for m in METRICS}
    n = len(ok)
    ttft_key = "ttft_admit" if load >= ADMIT_FROM_LOAD else "ttft"
    up = {m: upper95(v) for m, v in ratios.items()}
    mean = {m: _mean(v) for m, v in ratios.items()}

    def bound(d):
        vals = [d.get(ttft_key), d.get("tpot")]
        return None if any(v is None for v in vals) else max(vals)
    b_up, b_mean = bound(up), bound(mean)
    return {"mode": base, "method": "v2" if n >= MIN_PAIRS else "point", "pairs": n,
            "runs": [p.get("mode") for p in ok], "ratios": ratios, "mean": mean, "upper95": up,
            "bound_upper95": b_up, "bound_mean": b_mean,
            "met": None if b_up is None else b_up <= budget,
            "met_mean": None if b_mean is None else b_mean <= budget,
            "attainment": _mean(p["attainment"] for p in ok),
            "attainment_min": min((p["attainment"] for p in ok if p["attainment"] is not None), default=None),
            "hp_goodput_vs_alone": _mean(p["hp_goodput_vs_alone"] for p in ok),
            "be_vs_alone": _mean(p["be_vs_alone"] for p in ok),
            "aggregate": _mean(p["aggregate"] for p in ok) if all(p["aggregate"] is not None for p in ok) and ok
            else None}


def best_baseline(per_mode: Dict[str, dict]) -> dict:
    """The baseline with the largest aggregate: exclusive (HP alone, BE not run: 1.0) or one of the
    run's baseline modes."""
    best = {"mode": "exclusive", "aggregate": 1.0}
    for base, m in per_mode.items():
        if is_baseline(base) and m.get("aggregate") is not None and m["aggregate"] > best["aggregate"]:
            best = {"mode": base, "aggregate": m["aggregate"]}
    return best


# --- the highest load that keeps the target (zoo_table.py, over a size's loads) ------------------

def max_load(points: List[dict], target: float = ATTAINMENT_TARGET) -> dict:
    """points: one (size, BE, lengths) group's runs, each {"load", "alone": [request_log, ...],
    "modes": {base: [request_log, ...]}, "alone_hp": [hp result, ...]} (the logs of its included
    pairs). One SLO for the group: SLO_BUDGET x the mean over the lowest load's alone runs of their
    TTFT p99 and TPOT p99 (latency is judged against what the server does at the least load
    measured). At each load, per mode (and "alone"), attainment pooled over its pairs (all their good
    requests over all their requests). The highest load at which it is >= target at that load and
    every lower one measured: {"slo_ms", "loads", "alone": L or None, "modes": {base: L or None},
    "attainment": {load: {mode: a}}}. None: not even the lowest load keeps it."""
    pts = sorted((p for p in points if p.get("alone_hp")), key=lambda p: p["load"])
    if not pts:
        return {"slo_ms": None, "loads": [], "alone": None, "modes": {}, "attainment": {}}
    lo = pts[0]
    f = _mean(_get(h, "ttft_ms", "p99") for h in lo["alone_hp"])
    t = _mean(_get(h, "tpot_ms", "p99") for h in lo["alone_hp"])
    if f is None or t is None:
        return {"slo_ms": None, "loads": [p["load"] for p in pts], "alone": None, "modes": {}, "attainment": {}}
    slo = {"ttft_ms": SLO_BUDGET * f, "tpot_ms": SLO_BUDGET * t}

    def pooled(logs):
        good = n = 0
        for lg in logs:
            a = attainment(lg, slo["ttft_ms"], slo["tpot_ms"])
            if a:
                good, n = good + a["good"], n + a["requests"]
        return good / n if n else None
    att = {}
    for p in pts:
        row = {"alone": pooled(p["alone"])}
        for base, logs in p["modes"].items():
            row[base] = pooled(logs)
        att[p["load"]] = row
    names = {"alone"} | {b for p in pts for b in p["modes"]}
    highest = {}
    for name in names:
        h = None
        for p in pts:
            a = att[p["load"]].get(name)
            if a is None:
                continue  # not measured at this load: says nothing either way
            if a < target:
                break
            h = p["load"]
        highest[name] = h
    return {"slo_ms": slo, "loads": [p["load"] for p in pts], "alone": highest.pop("alone"),
            "modes": highest, "attainment": att}
