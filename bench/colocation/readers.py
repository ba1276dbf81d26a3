# SPDX-License-Identifier: Apache-2.0
"""run_matrix.py's readers: what the node's GPUs are (nvidia-smi), and what HP and BE wrote (their JSON
results) turned into a mode's record. No process is started here but nvidia-smi."""
from __future__ import annotations

import re
import subprocess
from typing import List, Optional

import common
from planning import ModeError


def parse_gpu_list(text: str) -> List[dict]:
    """`nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader` -> one
    {index, name, driver_version} per GPU (lines that do not parse are left out)."""
    out = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 3 and f[0].isdigit():
            out.append({"index": int(f[0]), "name": ",".join(f[1:-1]), "driver_version": f[-1]})
    return out


def gpu_info() -> dict:
    """The first GPU's name and driver, and the node's GPUs (nvidia-smi: every GPU of the node,
    whatever CUDA_VISIBLE_DEVICES says)."""
    info = {"name": None, "driver_version": None, "count": None, "gpus": []}
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        gpus = parse_gpu_list(r.stdout)
        if gpus:
            info = {"name": gpus[0]["name"], "driver_version": gpus[0]["driver_version"],
                    "count": len(gpus), "gpus": gpus}
        else:
            info["error"] = (r.stdout + r.stderr).strip()[:300]
    except (OSError, subprocess.SubprocessError) as e:
        info["error"] = str(e)
    return info


def read_hp(path: str, synthetic: bool, min_requests: int, rec: dict, hp) -> dict:
    """HP's result (hp_server.py's JSON, or gpuos-synth's in its shape) into rec["hp"]; notes for a
    thin or unfinished run. ModeError when HP wrote none or failed. hp: its Proc (exit code, log)."""
    js = common.read_json(path)
    if js is None:
        raise ModeError(f"HP wrote no result (rc={hp.poll()}): {hp.tail(1500)}")
    if synthetic:
        js = synth_hp(js)
    rec["hp"] = js
    if js.get("error"):
        raise ModeError(f"HP failed: {js['error']}")
    if js.get("unfinished"):
        rec["notes"].append(f"HP could not keep up: {js['unfinished']} requests unfinished at the drain "
                            "deadline (counted in the e2e tail as censored)")
    if js.get("requests", 0) < min_requests:
        rec["notes"].append(f"only {js.get('requests')} HP requests (< {min_requests})")
    return js


def synth_hp(js: dict) -> dict:
    """gpuos-synth's JSON in hp_server's shape (latencies in ms; no TTFT/TPOT)."""
    def ms(k):
        v = js.get(k)
        return v / 1e3 if isinstance(v, (int, float)) else None
    return {
        "role": "hp", "ok": bool(js.get("verified", True)), "synth": js,
        "requests": js.get("kernels", 0), "unfinished": 0,
        "achieved_rps": js.get("throughput_per_s"),
        "e2e_ms": {"n": js.get("kernels", 0), "p50": ms("p50_us"), "p90": ms("p90_us"),
                   "p99": ms("p99_us"), "max": ms("max_us"), "mean": ms("mean_us")},
        "ttft_ms": common.stats([]), "tpot_ms": common.stats([]),
        "error": None if js.get("verified", True) else "synth kernels not verified",
    }


def read_be(path: str, synthetic: bool, rec: dict, t0: Optional[float], t1: Optional[float]) -> None:
    """BE's result into rec: its JSON (rec["be"]) and its rate (rec["be_rate"], rec["be_unit"]): a
    synthetic BE's kernels over its wall time, a torch BE's progress over [t0, t1] (HP's window)."""
    js = common.read_json(path)
    if js is None:
        rec["notes"].append("BE wrote no result")
        return
    if synthetic:
        k, w = js.get("kernels"), js.get("wall_s")
        rate = k / w if k and w else js.get("throughput_per_s")
        rec["be"] = {"unit": "kernels/s", "synth": js}
        rec["be_rate"] = rate
        rec["be_unit"] = "kernels/s"
        return
    samples = js.pop("samples", [])
    rec["be"] = js
    rec["be_unit"] = js.get("unit")
    if js.get("error"):
        rec["notes"].append(f"BE error: {js['error']}")
    if t0 is not None and t1 is not None:
        r = common.rate_over(samples, t0, t1)
        if r is None and samples and samples[0][0] <= t0 < samples[-1][0] \
                and samples[-1][0] - t0 >= 0.5 * (t1 - t0):
            # BE's last sample came before the window's end (it was stopped early): use what it covers.
            t1 = samples[-1][0]
            r = common.rate_over(samples, t0, t1)
            rec["notes"].append("BE progress ends before HP's window: rate over the covered part")
        rec["be_rate"] = r
        rec["be_window"] = [t0, t1]
        if r is None:
            rec["notes"].append("BE progress does not cover the measured window")


# gpuosd's budget line at each probe (src/policies/budget/stage_lend.cc); the part in parentheses only
# from f219a19 on, the load growth's own parentheses from #56's stages on.
_BUDGET_LINE = re.compile(
    r"budget: tenant (?P<tenant>\d+) slowdown p99 (?P<p99>[\d.]+) over (?P<n>\d+) launches, "
    r"(?:admissions p99 (?P<adm>[\d.]+) over (?P<adm_n>\d+)(?: \(sizes p99 x(?P<adm_sizes>[\d.]+)\))?, )?"
    r"load growth (?P<growth>[\d.]+)"
    r"(?: \(time-weighted median x(?P<growth_median>[\d.]+)(?:, step-sized mean x(?P<growth_step_mean>[\d.]+))?; steps (?P<growth_steps>\d+), alone (?P<growth_alone>\d+); "
    r"(?P<growth_cuts>\d+) cuts by it\))?, best-effort share (?P<share>[\d.]+)"
    r"(?: \((?P<low>[\d.]+)-(?P<high>[\d.]+) since the last line: (?P<cuts>\d+) cuts over the budget, "
    r"(?P<downs>\d+) steps down, (?P<ups>\d+) up; (?P<held>\d+) decisions held for a phase"
    r"(?:, (?P<held_ms>\d+) ms)?\))?"
    r"(?:, \d+ pauses; budget held by (?P<limit>[a-z-]+))?")


def budget_log(text: str) -> Optional[dict]:
    """gpuosd's budget lines (one per probe, every 5 s) over a mode -> what moved the share: its
    range, the cuts over the budget, steps down and up, decisions held for a phase, and the meter's
    and load growth's range over the lines that had launches. None without such lines."""
    lines = [m.groupdict() for m in _BUDGET_LINE.finditer(text)]
    if not lines:
        return None
    moved = [d for d in lines if d["low"] is not None]
    measured = [d for d in lines if int(d["n"]) > 0]
    out = {"lines": len(lines),
           "share_at_probes": [float(d["share"]) for d in lines],
           "share_low": min([float(d["low"]) for d in moved] + [float(d["share"]) for d in lines]),
           "share_high": max([float(d["high"]) for d in moved] + [float(d["share"]) for d in lines])}
    for key in ("cuts", "downs", "ups", "held"):
        out[key] = sum(int(d[key]) for d in moved) if moved else None
    by_growth = [d for d in moved if d["growth_cuts"] is not None]
    out["cuts_by_growth"] = sum(int(d["growth_cuts"]) for d in by_growth) if by_growth else None
    medians = [float(d["growth_median"]) for d in measured if d["growth_median"] is not None]
    out["growth_median_range"] = [min(medians), max(medians)] if medians else None
    step_means = [float(d["growth_step_mean"]) for d in measured if d["growth_step_mean"] is not None]
    out["growth_step_mean_range"] = [min(step_means), max(step_means)] if step_means else None
    for key in ("p99", "growth"):
        vals = [float(d[key]) for d in measured]
        out[f"{key}_range"] = [min(vals), max(vals)] if vals else None
    timed_holds = [d for d in moved if d["held_ms"] is not None]
    # The time held for phases, and its share of the periods the lines close (one line per probe
    # period, 5 s; a mode's first line, at its budget's first activity, closes none).
    out["held_ms"] = sum(int(d["held_ms"]) for d in timed_holds) if timed_holds else None
    out["held_fraction"] = out["held_ms"] / (5000.0 * max(len(timed_holds) - 1, 1)) if timed_holds else None
    # What held the budget unspent, line by line (from #56's budget_limit on): name -> lines.
    limits = [d["limit"] for d in lines if d["limit"] is not None]
    out["limits"] = {name: limits.count(name) for name in sorted(set(limits))} if limits else None
    admitted = [float(d["adm"]) for d in lines if d["adm_n"] is not None and int(d["adm_n"]) > 0]
    out["admissions_p99_range"] = [min(admitted), max(admitted)] if admitted else None
    # How much larger (alone) the admissions at their p99 were than alone's (from ba46e5b+ on).
    sizes = [float(d["adm_sizes"]) for d in lines if d["adm_sizes"] is not None and int(d["adm_n"]) > 0]
    out["admission_sizes_range"] = [min(sizes), max(sizes)] if sizes else None
    return out


def describe_budget_log(b: dict) -> str:
    """One note line from budget_log()."""
    parts = [f"budget (gpuosd's {b['lines']} probe lines): best-effort share {b['share_low']:.3f}-{b['share_high']:.3f}"]
    if b.get("cuts") is not None:
        parts.append(f"{b['cuts']} cuts over the budget, {b['downs']} steps down, {b['ups']} up, "
                     f"{b['held']} decisions held for a phase")
    if b.get("held_ms") is not None:
        parts.append(f"held for phases {b['held_ms']} ms ({100 * b['held_fraction']:.0f}% of the lines' 5 s periods)")
    if b.get("p99_range"):
        parts.append(f"meter p99 {b['p99_range'][0]:.3f}-{b['p99_range'][1]:.3f}")
    if b.get("admissions_p99_range"):
        parts.append(f"admissions p99 {b['admissions_p99_range'][0]:.3f}-{b['admissions_p99_range'][1]:.3f}")
    if b.get("admission_sizes_range"):
        parts.append(f"admission sizes p99 x{b['admission_sizes_range'][0]:.3f}-{b['admission_sizes_range'][1]:.3f}")
    if b.get("growth_range"):
        parts.append(f"load growth {b['growth_range'][0]:.3f}-{b['growth_range'][1]:.3f}")
    if b.get("growth_median_range"):
        parts.append(f"its time-weighted median {b['growth_median_range'][0]:.3f}-{b['growth_median_range'][1]:.3f}")
    if b.get("growth_step_mean_range"):
        parts.append(f"its step-sized mean {b['growth_step_mean_range'][0]:.3f}-{b['growth_step_mean_range'][1]:.3f}")
    if b.get("cuts_by_growth") is not None:
        parts.append(f"{b['cuts_by_growth']} cuts by load growth (the meter alone within the budget)")
    if b.get("limits"):
        parts.append("budget held by " + ", ".join(f"{k} x{v}" for k, v in b["limits"].items()))
    return "; ".join(parts)
