#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Report of gpu/mps_cost.sh (issue #23, MPS's own cost): compares gpu/tests/mps_cost.py's runs.

  mps_cost_report.py --out DIR RUN.json...   [--baseline no-mps] [--main mps] [--drift no-mps-again]

Writes DIR/mps_cost.json and DIR/mps_cost.md: each run's decode-step time against the baseline
(no MPS), where the main MPS run's extra time lies (inside kernels, in the gaps between them, or
around the graph), the kernels whose time grew most, a fit of that growth as a fixed amount per
kernel plus a share of its length, the microbenchmarks, the clocks, and a verdict computed from
these numbers (and which tenant-side setting, if any, removes the cost). No torch needed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional

# Not settings: the pipe and log directories only say whether a run is an MPS client.
HIDDEN_ENV = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")


def _get(d, *path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _sub(a, b):
    return None if a is None or b is None else a - b


def load(paths: List[str]) -> List[dict]:
    runs = []
    for p in paths:
        try:
            with open(p) as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            r = {"variant": os.path.splitext(os.path.basename(p))[0], "ok": False, "error": f"unreadable: {e}"}
        r.setdefault("variant", os.path.splitext(os.path.basename(p))[0])
        runs.append(r)
    return runs


def row(run: dict) -> dict:
    """The figures of one run that the report compares (None where the run lacks them)."""
    env = run.get("env") or {}
    cuda_env = {k: v for k, v in (env.get("cuda_env") or {}).items() if k not in HIDDEN_ENV}
    prof = run.get("profile") or {}
    st = prof.get("step") or {}
    micro = run.get("micro") or {}

    def micro_fig(name: str) -> dict:
        m = micro.get(name) or {}
        p = m.get("profile") or {}
        return {"event_us_per_kernel": _get(m, "event_us_per_kernel", "p50"), "kernel_mean_us": p.get("kernel_mean_us"),
                "gap_mean_us": p.get("gap_mean_us"), "start_to_start_us": p.get("start_to_start_us")}
    return {
        "variant": run.get("variant"),
        "ok": bool(run.get("ok")),
        "error": run.get("error"),
        "mps": bool(env.get("mps_control_pipe_exists")),
        "mps_server_seen": env.get("mps_server_running_after_init"),
        "cuda_env": cuda_env,
        "settings": dict(cuda_env),   # report() keeps only what differs from the baseline
        "gpu": env.get("gpu") or _get(env, "smi", "name"),
        "driver": _get(env, "smi", "driver_version"),
        "step_p50_ms": _get(run, "timed", "event_ms", "p50"),
        "step_mean_ms": _get(run, "timed", "event_ms", "mean"),
        "step_p99_ms": _get(run, "timed", "event_ms", "p99"),
        "host_p50_ms": _get(run, "timed", "host_ms", "p50"),
        "launch_p50_us": _get(run, "timed", "launch_us", "p50"),
        "sm_mhz_median": _get(run, "clocks", "during", "sm_mhz", "median"),
        "sm_mhz_min": _get(run, "clocks", "during", "sm_mhz", "min"),
        "sm_mhz_before": _get(run, "clocks", "before", "clocks.sm"),
        "sm_mhz_after": _get(run, "clocks", "after", "clocks.sm"),
        "power_w_median": _get(run, "clocks", "during", "power_w", "median"),
        "profile_error": prof.get("error") if prof else "no profile",
        "grouping": prof.get("grouping"),
        "ops_per_step": prof.get("ops_per_step"),
        "kernel_sum_us": _get(st, "kernel_sum_us", "mean"),
        "span_us": _get(st, "span_us", "mean"),
        "gap_sum_us": _get(st, "gap_sum_us", "mean"),
        "gap_mean_us": _get(st, "gap_mean_us", "mean"),
        "gap_max_us": _get(st, "gap_max_us", "mean"),
        "between_steps_us": _get(prof, "between_steps_us", "mean"),
        "traced_ratio": (_get(st, "span_us", "mean") / (_get(run, "timed", "event_ms", "mean") * 1e3)
                         if _get(st, "span_us", "mean") and _get(run, "timed", "event_ms", "mean") else None),
        "tiny": micro_fig("tiny"),
        "wide": micro_fig("wide"),
        "read_gbps": _get(run, "bandwidth", "read_gbps_best"),
        "copy_gbps": _get(run, "bandwidth", "copy_gbps_best"),
        "companion": run.get("companion"),
    }


def fit_growth(pairs: List[tuple]) -> dict:
    """Weighted least squares of a kernel's extra time on its base time: delta = a + b * base.

    pairs: (weight = count per step, base mean us, delta mean us). a: us added to every kernel
    whatever its length; b: fraction added in proportion to its length."""
    sw = sum(w for w, _, _ in pairs)
    if not pairs or sw <= 0:
        return {"a_us": None, "b": None, "names": 0}
    mx = sum(w * x for w, x, _ in pairs) / sw
    my = sum(w * y for w, _, y in pairs) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x, _ in pairs)
    sxy = sum(w * (x - mx) * (y - my) for w, x, y in pairs)
    if sxx <= 1e-12 * max(1.0, mx * mx) * sw:
        return {"a_us": my, "b": 0.0, "names": len(pairs)}
    b = sxy / sxx
    return {"a_us": my - b * mx, "b": b, "names": len(pairs)}


def compare(base_run: dict, run: dict, top: int = 12) -> dict:
    """Where run's extra step time over base_run lies, and which kernels grew."""
    b, r = row(base_run), row(run)
    out = {"variant": r["variant"], "baseline": b["variant"]}
    if b["step_mean_ms"] and r["step_mean_ms"]:
        out["step_ratio"] = r["step_mean_ms"] / b["step_mean_ms"]
        out["step_p50_ratio"] = (r["step_p50_ms"] / b["step_p50_ms"]) if b["step_p50_ms"] and r["step_p50_ms"] else None
        out["host_p50_ratio"] = (r["host_p50_ms"] / b["host_p50_ms"]) if b["host_p50_ms"] and r["host_p50_ms"] else None
        out["delta_step_us"] = (r["step_mean_ms"] - b["step_mean_ms"]) * 1e3
    else:
        out["step_ratio"] = None
        out["delta_step_us"] = None
    dk, dg, ds = (_sub(r["kernel_sum_us"], b["kernel_sum_us"]), _sub(r["gap_sum_us"], b["gap_sum_us"]),
                  _sub(r["span_us"], b["span_us"]))
    out["delta_kernel_sum_us"], out["delta_gap_sum_us"], out["delta_span_us"] = dk, dg, ds
    # The rest: before the first kernel and after the last (the replay's launch latency, events).
    out["delta_outside_us"] = _sub(out["delta_step_us"], ds)
    d = out["delta_step_us"]
    if d is not None and abs(d) > 1e-9 and dk is not None and dg is not None:
        out["share_kernels"], out["share_gaps"] = dk / d, dg / d
        out["share_outside"] = 1.0 - out["share_kernels"] - out["share_gaps"]
    bk = {k["name"]: k for k in (_get(base_run, "profile", "kernels") or [])}
    rk = {k["name"]: k for k in (_get(run, "profile", "kernels") or [])}
    grown, pairs = [], []
    for name in bk.keys() & rk.keys():
        x, y = bk[name], rk[name]
        if x.get("mean_us") is None or y.get("mean_us") is None:
            continue
        grown.append({
            "name": name, "per_step": y.get("per_step"), "base_mean_us": x["mean_us"], "mean_us": y["mean_us"],
            "delta_mean_us": y["mean_us"] - x["mean_us"],
            "delta_per_step_us": (y.get("per_step_us") or 0.0) - (x.get("per_step_us") or 0.0),
            "base_gap_before_us": x.get("gap_before_mean_us"), "gap_before_us": y.get("gap_before_mean_us"),
        })
        pairs.append((min(x.get("per_step") or 0.0, y.get("per_step") or 0.0), x["mean_us"], y["mean_us"] - x["mean_us"]))
    grown.sort(key=lambda g: (-round(g["delta_per_step_us"], 6), g["name"]))
    out["kernels_grown"] = grown[:top]
    out["kernels_only_in_baseline"] = sorted(bk.keys() - rk.keys())
    out["kernels_only_here"] = sorted(rk.keys() - bk.keys())
    fit = fit_growth(pairs)
    out["fit"] = fit
    if fit["a_us"] is not None and b["ops_per_step"] and b["kernel_sum_us"] is not None:
        out["fit"]["fixed_per_step_us"] = fit["a_us"] * b["ops_per_step"]
        out["fit"]["proportional_per_step_us"] = fit["b"] * b["kernel_sum_us"]
    gaps = [(g["gap_before_us"] - g["base_gap_before_us"], g["name"]) for g in grown
            if g["gap_before_us"] is not None and g["base_gap_before_us"] is not None]
    out["gap_growth_max"] = max(gaps) if gaps else None
    for name in ("tiny", "wide"):
        out[f"{name}_delta"] = {k: _sub(r[name][k], b[name][k]) for k in b[name]}
    out["delta_sm_mhz"] = _sub(r["sm_mhz_median"], b["sm_mhz_median"])
    out["read_gbps_ratio"] = (r["read_gbps"] / b["read_gbps"]) if r["read_gbps"] and b["read_gbps"] else None
    return out


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{(x - 1) * 100:+.1f}%"


def verdict(rows: Dict[str, dict], comps: Dict[str, dict], base: str, main: str, drift: str) -> dict:
    """One paragraph from the numbers, and the facts it rests on."""
    facts: dict = {}
    if base not in rows or not rows[base]["ok"]:
        return {"text": f"No verdict: the baseline run {base!r} is missing or failed.", "facts": facts}
    if main not in comps or comps[main].get("step_ratio") is None:
        return {"text": f"No verdict: the MPS run {main!r} is missing or failed.", "facts": facts}
    c = comps[main]
    cost = (c["step_ratio"] - 1) * 100
    noise = None
    if drift in comps and comps[drift].get("step_ratio") is not None:
        noise = abs(comps[drift]["step_ratio"] - 1) * 100
    thr = max(1.0, 2 * noise) if noise is not None else 1.0
    facts.update(cost_pct=cost, noise_pct=noise, threshold_pct=thr)
    parts = []
    if not rows[main]["mps"]:
        parts.append(f"Warning: run {main!r} found no MPS control daemon at its pipe directory, so it was "
                     f"probably not an MPS client.")
    if rows[base]["mps"]:
        parts.append(f"Warning: the baseline {base!r} found an MPS control daemon at its pipe directory.")
    noise_txt = f"; the baseline repeated moved {noise:.1f}%" if noise is not None else ""
    parts.append(f"MPS alone costs the decode step {cost:+.1f}% ({rows[main]['step_mean_ms']:.3f} vs "
                 f"{rows[base]['step_mean_ms']:.3f} ms mean, CUDA events{noise_txt}).")
    if cost <= thr:
        parts.append(f"That is within {thr:.1f}%: this run does not reproduce a cost of MPS.")
    else:
        d = c["delta_step_us"]
        sk, sg, so = c.get("share_kernels"), c.get("share_gaps"), c.get("share_outside")
        if sk is None:
            parts.append("The profile is missing, so where the time goes is unknown.")
        else:
            where = ("inside the kernels" if sk >= 0.6 else
                     "between the kernels (the GPU idles longer between consecutive kernels of the graph)" if sg >= 0.6 else
                     "around the graph (before its first kernel or after its last)" if so >= 0.6 else
                     "spread over kernels, gaps and the graph's edges")
            facts["where"] = where
            parts.append(f"Of the {d:.0f} us more per step, {c['delta_kernel_sum_us']:.0f} us are longer kernels "
                         f"({sk * 100:.0f}%), {c['delta_gap_sum_us']:.0f} us longer gaps between kernels ({sg * 100:.0f}%) "
                         f"and {c['delta_outside_us']:.0f} us around the graph ({so * 100:.0f}%): the cost is {where}.")
            fit = c.get("fit") or {}
            fixed, prop = fit.get("fixed_per_step_us"), fit.get("proportional_per_step_us")
            dk = c["delta_kernel_sum_us"]
            if sk >= 0.3 and fixed is not None and prop is not None and dk > 0:
                if fixed >= 0.6 * dk:
                    shape = (f"about {fit['a_us']:.2f} us added to every kernel whatever its length "
                             f"({fixed:.0f} us over {rows[base]['ops_per_step']} kernels): a per-kernel overhead "
                             f"(the kernel's launch and drain on the GPU), not slower work")
                elif prop >= 0.6 * dk:
                    shape = (f"kernels {fit['b'] * 100:.1f}% longer in proportion to their length: their work itself "
                             f"runs slower (memory path or clock)")
                else:
                    shape = (f"{fit['a_us']:.2f} us per kernel ({fixed:.0f} us a step) plus {fit['b'] * 100:.1f}% of "
                             f"each kernel's length ({prop:.0f} us a step)")
                facts["kernel_growth"] = shape
                parts.append(f"The longer kernels fit {shape}.")
            top = c.get("kernels_grown") or []
            if top:
                g = top[0]
                parts.append(f"Largest growth: {short(g['name'], 60)} ({g['per_step']:.0f}x a step, "
                             f"{g['base_mean_us']:.2f} -> {g['mean_us']:.2f} us).")
        tiny = c.get("tiny_delta") or {}
        if tiny.get("event_us_per_kernel") is not None:
            parts.append(f"A graph of tiny kernels: {tiny['event_us_per_kernel']:+.2f} us per kernel under MPS "
                         f"(kernel {fmt_signed(tiny.get('kernel_mean_us'))} us, gap {fmt_signed(tiny.get('gap_mean_us'))} us).")
        dm = c.get("delta_sm_mhz")
        bm = rows[base].get("sm_mhz_median")
        if dm is not None and bm:
            if dm < -0.01 * bm:
                parts.append(f"The SM clock ran lower under MPS ({rows[main]['sm_mhz_median']:.0f} vs {bm:.0f} MHz), "
                             f"which alone would explain up to {-dm / bm * 100:.1f}%.")
            else:
                parts.append(f"The SM clock was the same ({rows[main]['sm_mhz_median']:.0f} vs {bm:.0f} MHz median): "
                             f"not a clock effect.")
        rr = c.get("read_gbps_ratio")
        if rr is not None and rr < 0.98:
            parts.append(f"Memory read bandwidth was {(1 - rr) * 100:.1f}% lower under MPS.")
    # Tenant-side settings under MPS.
    tried = []
    for v, cv in comps.items():
        if (v in (main, base, drift) or not rows.get(v, {}).get("mps") or rows[v].get("companion")
                or cv.get("step_ratio") is None):
            continue
        tried.append(((cv["step_ratio"] - 1) * 100, v))
    tried.sort()
    facts["settings"] = {v: p for p, v in tried}
    if tried:
        best_pct, best = tried[0]
        settings = ", ".join(f"{k}={val}" for k, val in rows[best]["settings"].items()) or "no variable"
        if cost > thr and best_pct <= thr:
            facts["removes"] = best
            parts.append(f"Setting {settings} ({best}) removes it: {best_pct:+.1f}% against no MPS.")
        elif cost > thr and best_pct <= 0.5 * cost:
            facts["reduces"] = best
            parts.append(f"Setting {settings} ({best}) reduces it to {best_pct:+.1f}%.")
        elif cost > thr:
            listing = ", ".join(f"{v} {p:+.1f}%" for p, v in tried)
            parts.append(f"No tenant-side setting tried removes it ({listing}).")
    # Controls: a setting that moves the step without MPS too is no MPS fix but a change of its own.
    for v, cv in comps.items():
        if v in (base, drift) or rows.get(v, {}).get("mps") or cv.get("step_ratio") is None:
            continue
        p = (cv["step_ratio"] - 1) * 100
        if abs(p) > thr:
            settings = ", ".join(f"{k}={val}" for k, val in rows[v]["settings"].items()) or "no variable"
            parts.append(f"Without MPS, {settings} ({v}) changes the step by {p:+.1f}% too.")
    return {"text": " ".join(parts), "facts": facts}


def companion_rate(c: dict) -> str:
    if c.get("error"):
        return f"failed: {short(c['error'], 40)}"
    if c.get("kernels_per_s") is not None:
        return f"{c['kernels_per_s']:.1f} kernels/s on {c.get('sms')} SMs (as it saw them)"
    if c.get("rate_since_ready") is not None:
        return f"{c['rate_since_ready']:.2f} steps/s"
    return "?"


def presence(runs: Dict[str, dict], rows: Dict[str, dict], main: str) -> Dict[str, dict]:
    """Each run beside a companion against the main MPS run alone: what the companion's presence
    costs the step beyond MPS's own cost, and in which kernels."""
    out: Dict[str, dict] = {}
    if main not in runs or not rows.get(main, {}).get("ok"):
        return out
    for v, r in rows.items():
        if r.get("companion") and r["ok"]:
            c = compare(runs[main], runs[v], top=5)
            c["companion"] = r["companion"]
            out[v] = c
    return out


def presence_markdown(pres: Dict[str, dict], main: str) -> List[str]:
    if not pres:
        return []
    L = ["", f"## Beside a best-effort companion (each against `{main}` alone)", "",
         "The companion: an MPS client at priority 1 with a share of the threads (gpu/tests/presence_be.cu: "
         "`alu` FMAs that leave room on its SMs, `alufull` FMAs that fill them, `mem` streaming reads; `train` "
         "the suite's trainer). Fit as above, against the MPS run alone.", "",
         "| variant | companion | its rate | step vs MPS alone | kernels us | gaps us | fit: us per kernel | "
         "fit: share of length | grew most |", "|---|---|---|---|---|---|---|---|---|"]
    for v, c in pres.items():
        comp, fit = c["companion"], c.get("fit") or {}
        top = "; ".join(f"`{short(g['name'], 40)}` {g['base_mean_us']:.1f}->{g['mean_us']:.1f} us"
                        for g in (c.get("kernels_grown") or [])[:3])
        L.append(f"| {v} | {comp.get('kind')} at {comp.get('threads_pct')}% | {companion_rate(comp)} | "
                 f"{_pct(c.get('step_ratio'))} | {fmt(c.get('delta_kernel_sum_us'), '+.0f')} | "
                 f"{fmt(c.get('delta_gap_sum_us'), '+.0f')} | {fmt(fit.get('a_us'), '+.3f')} | "
                 f"{fmt(None if fit.get('b') is None else fit['b'] * 100, '+.1f')}% | {top or '-'} |")
    return L


def short(name: str, n: int = 70) -> str:
    name = " ".join(str(name).split())
    return name if len(name) <= n else name[: n - 3] + "..."


def fmt(x, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def fmt_signed(x, spec: str = "+.2f") -> str:
    return "n/a" if x is None else format(x, spec)


def markdown(rows: List[dict], comps: Dict[str, dict], v: dict, base: str, main: str,
             pres: Optional[Dict[str, dict]] = None) -> str:
    r0 = next((r for r in rows if r["gpu"]), {})
    L = ["# MPS's own cost to a graph-replayed decode step (issue #23)", "",
         f"GPU {r0.get('gpu') or '?'}, driver {r0.get('driver') or '?'}. Baseline `{base}`; "
         f"step = one CUDA-graph replay (CUDA events), kernels from CUPTI (torch.profiler).", "",
         "## Verdict", "", v["text"], "",
         "## Step time", "",
         "Step: CUDA events around each replay, no profiler. Kernel sum, gaps, span (first start to last end): "
         "the profiled replays (CUPTI adds its own cost per kernel: compare these between runs; traced/untraced "
         "is the profiled span over the untraced step).", "",
         "| variant | MPS | settings | step p50 ms | mean ms | p99 ms | vs baseline | host p50 ms | "
         "SM MHz median (min) | kernels/step | kernel sum us | gap sum us | gap mean us | span us | traced/untraced | "
         "between steps us |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = comps.get(r["variant"], {})
        st = ", ".join(f"{k}={val}" for k, val in r["settings"].items()) or "-"
        if not r["ok"]:
            L.append(f"| {r['variant']} | {'yes' if r['mps'] else 'no'} | {st} | failed: {short(r['error'] or '?', 60)} "
                     "| | | | | | | | | | | | |")
            continue
        L.append(f"| {r['variant']} | {'yes' if r['mps'] else 'no'} | {st} | {fmt(r['step_p50_ms'], '.3f')} | "
                 f"{fmt(r['step_mean_ms'], '.3f')} | {fmt(r['step_p99_ms'], '.3f')} | "
                 f"{_pct(c.get('step_ratio')) if r['variant'] != base else '1 (baseline)'} | {fmt(r['host_p50_ms'], '.3f')} | "
                 f"{fmt(r['sm_mhz_median'], '.0f')} ({fmt(r['sm_mhz_min'], '.0f')}) | {fmt(r['ops_per_step'], 'd')} | "
                 f"{fmt(r['kernel_sum_us'], '.0f')} | {fmt(r['gap_sum_us'], '.0f')} | {fmt(r['gap_mean_us'], '.2f')} | "
                 f"{fmt(r['span_us'], '.0f')} | {fmt(r['traced_ratio'], '.3f')} | {fmt(r['between_steps_us'], '.1f')} |")
    L += ["", "## Where the extra time lies (each run against the baseline, us per step)", "",
          "Step from CUDA events (untraced); kernels and gaps from the profiles; around the graph = the rest "
          "(launch latency before the first kernel, the tail after the last). Fit: each kernel name's extra time "
          "= a (us per kernel) + b x its baseline length, weighted by its count per step.", "",
          "| variant | step | kernels | gaps | around the graph | fit: us per kernel | fit: share of length |",
          "|---|---|---|---|---|---|---|"]
    for name, c in comps.items():
        fit = c.get("fit") or {}
        L.append(f"| {name} | {fmt(c.get('delta_step_us'), '+.0f')} | {fmt(c.get('delta_kernel_sum_us'), '+.0f')} | "
                 f"{fmt(c.get('delta_gap_sum_us'), '+.0f')} | {fmt(c.get('delta_outside_us'), '+.0f')} | "
                 f"{fmt(fit.get('a_us'), '+.3f')} | {fmt(None if fit.get('b') is None else fit['b'] * 100, '+.2f')}% |")
    c = comps.get(main)
    if c and c.get("kernels_grown"):
        L += ["", f"## Kernels whose time grew most (`{main}` against `{base}`)", "",
              "| kernel | per step | base us | MPS us | +us each | +us per step | gap before: base / MPS us |",
              "|---|---|---|---|---|---|---|"]
        for g in c["kernels_grown"]:
            L.append(f"| `{short(g['name'])}` | {fmt(g['per_step'], '.0f')} | {fmt(g['base_mean_us'], '.2f')} | "
                     f"{fmt(g['mean_us'], '.2f')} | {fmt(g['delta_mean_us'], '+.2f')} | {fmt(g['delta_per_step_us'], '+.1f')} | "
                     f"{fmt(g['base_gap_before_us'], '.2f')} / {fmt(g['gap_before_us'], '.2f')} |")
        if c["kernels_only_here"] or c["kernels_only_in_baseline"]:
            L.append("")
            L.append(f"Kernels in only one of the two: {len(c['kernels_only_in_baseline'])} only in `{base}`, "
                     f"{len(c['kernels_only_here'])} only in `{main}` (different library choices).")
    L += presence_markdown(pres or {}, main)
    L += ["", "## Microbenchmarks and bandwidth", "",
          "Graph of 200 `x.add_(1)` kernels: tiny (1 block) and wide (4M floats); per kernel: event time, "
          "profiled duration, gap, start-to-start.", "",
          "| variant | tiny us/kernel | tiny kernel us | tiny gap us | tiny start-to-start us | wide us/kernel | "
          "wide kernel us | wide gap us | read GB/s | copy GB/s |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t, w = r["tiny"], r["wide"]
        L.append(f"| {r['variant']} | {fmt(t['event_us_per_kernel'], '.2f')} | {fmt(t['kernel_mean_us'], '.2f')} | "
                 f"{fmt(t['gap_mean_us'], '.2f')} | {fmt(t['start_to_start_us'], '.2f')} | "
                 f"{fmt(w['event_us_per_kernel'], '.2f')} | {fmt(w['kernel_mean_us'], '.2f')} | {fmt(w['gap_mean_us'], '.2f')} | "
                 f"{fmt(r['read_gbps'], '.0f')} | {fmt(r['copy_gbps'], '.0f')} |")
    L += ["", "## Clocks", "", "| variant | SM MHz before | median during | min during | after | power W median |",
          "|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['variant']} | {fmt(r['sm_mhz_before'], '.0f')} | {fmt(r['sm_mhz_median'], '.0f')} | "
                 f"{fmt(r['sm_mhz_min'], '.0f')} | {fmt(r['sm_mhz_after'], '.0f')} | {fmt(r['power_w_median'], '.0f')} |")
    notes = [f"- `{r['variant']}`: profile: {r['profile_error']}" for r in rows if r["ok"] and r["profile_error"]]
    notes += [f"- `{r['variant']}`: profile split by {r['grouping']} (not correlation ids)" for r in rows
              if r["ok"] and r["grouping"] and r["grouping"] != "correlation"]
    notes += [f"- `{r['variant']}`: an MPS control daemon listened, but no nvidia-cuda-mps-server process "
              f"was seen after CUDA init" for r in rows if r["mps"] and r["mps_server_seen"] is False]
    notes += [f"- `{r['variant']}`: no MPS control daemon listened where it looked, but an MPS server was "
              f"running" for r in rows if r["ok"] and not r["mps"] and r["mps_server_seen"]]
    if notes:
        L += ["", "## Notes", ""] + notes
    return "\n".join(L) + "\n"


def report(runs: List[dict], base: str = "no-mps", main: str = "mps", drift: str = "no-mps-again") -> dict:
    rows = [row(r) for r in runs]
    by = {r["variant"]: r for r in runs}
    rows_by = {r["variant"]: r for r in rows}
    # A run's settings: its CUDA_* variables that the baseline lacks or sets otherwise.
    base_env = rows_by[base]["cuda_env"] if base in rows_by else {}
    for r in rows:
        r["settings"] = {k: v for k, v in r["cuda_env"].items() if base_env.get(k) != v}
        r["settings"].update({k: "(unset)" for k in base_env if k not in r["cuda_env"] and r["ok"]})
    comps: Dict[str, dict] = {}
    if base in by and rows_by[base]["ok"]:
        for r in runs:
            if r["variant"] != base and rows_by[r["variant"]]["ok"]:
                comps[r["variant"]] = compare(by[base], r)
    v = verdict(rows_by, comps, base, main, drift)
    pres = presence(by, rows_by, main)
    return {"baseline": base, "main": main, "drift": drift, "runs": rows, "comparisons": comps,
            "presence": pres, "verdict": v["text"], "verdict_facts": v["facts"],
            "md": markdown(rows, comps, v, base, main, pres)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for mps_cost.json and mps_cost.md")
    ap.add_argument("--baseline", default="no-mps")
    ap.add_argument("--main", default="mps")
    ap.add_argument("--drift", default="no-mps-again")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    rep = report(load(a.runs), a.baseline, a.main, a.drift)
    md = rep.pop("md")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "mps_cost.json"), "w") as f:
        json.dump(rep, f, indent=1)
    with open(os.path.join(a.out, "mps_cost.md"), "w") as f:
        f.write(md)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
