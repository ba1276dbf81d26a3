# SPDX-License-Identifier: Apache-2.0
"""The torch-free half of gpu/tests/mps_cost.py: summaries, the environment a run saw, and the
analysis of a torch.profiler (kineto) Chrome trace of CUDA graph replays.

A replayed graph's kernels all carry the correlation id of the one cudaGraphLaunch that ran them
(CUPTI), so that id splits the trace into replays. Where the trace has no correlation ids, equal
chunks (when the op count divides) or the largest gaps split it instead.
"""
from __future__ import annotations

import math
import os
from collections import Counter
import sys
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "colocation"))
from common import percentile  # noqa: E402  (torch-free: the suite's percentile)

# Chrome-trace categories of work the GPU ran (kineto's names; compared lowercased).
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")

# Environment variables worth recording: every CUDA_* (CUDA_MPS_*, CUDA_DEVICE_MAX_CONNECTIONS,
# CUDA_VISIBLE_DEVICES, CUDA_MODULE_LOADING ...) and the allocator's settings.
ENV_PREFIXES = ("CUDA_", "PYTORCH_CUDA_ALLOC_CONF", "NVIDIA_")
TEXT_FIELDS = ("name", "driver_version", "compute_mode", "persistence_mode", "uuid", "pci.bus_id")
DEFAULT_PIPE = "/tmp/nvidia-mps"   # the driver's pipe directory when CUDA_MPS_PIPE_DIRECTORY is unset


def summary(vals: Iterable[float]) -> dict:
    """{n, mean, p50, p90, p99, min, max} (values None when there are none)."""
    s = sorted(float(v) for v in vals)
    if not s:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None}
    return {"n": len(s), "mean": sum(s) / len(s), "p50": percentile(s, 50), "p90": percentile(s, 90),
            "p99": percentile(s, 99), "min": s[0], "max": s[-1]}


# ---------------------------------------------------------------------------------------------
# The environment

def mps_processes(proc_root: str = "/proc") -> List[dict]:
    """Every MPS control daemon or server on the machine (comm "nvidia-cuda-mps", 15 characters
    of either name): pid, cmd (argv[0]'s base name) and the pipe directory in its environment
    (None: unset or unreadable)."""
    out = []
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return out
    for d in sorted(entries):
        if not d.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, d, "comm"), "rb") as f:
                comm = f.read().decode(errors="replace").strip()
        except OSError:
            continue
        if not comm.startswith("nvidia-cuda-mps"):
            continue
        pipe = None
        try:
            with open(os.path.join(proc_root, d, "environ"), "rb") as f:
                for kv in f.read().split(b"\0"):
                    if kv.startswith(b"CUDA_MPS_PIPE_DIRECTORY="):
                        pipe = kv.split(b"=", 1)[1].decode(errors="replace")
        except OSError:
            pass
        cmd = comm
        try:
            with open(os.path.join(proc_root, d, "cmdline"), "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
            cmd = os.path.basename(argv0) or comm
        except OSError:
            pass
        out.append({"pid": int(d), "cmd": cmd, "pipe_dir": pipe})
    return out


def env_info(environ: Dict[str, str], proc_root: str = "/proc") -> dict:
    """What decides whether a process is an MPS client, and its settings."""
    cuda_env = {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)}
    pipe = environ.get("CUDA_MPS_PIPE_DIRECTORY")
    effective = pipe or DEFAULT_PIPE
    procs = mps_processes(proc_root)
    return {
        "cuda_env": cuda_env,
        "mps_pipe_dir_set": pipe is not None,
        "mps_pipe_dir": pipe,
        # A client connects when a control daemon listens on this pipe directory.
        "mps_control_pipe_exists": os.path.exists(os.path.join(effective, "control")),
        "mps_processes": procs,
        # The server the driver starts for the first client (daemon and server share the comm
        # "nvidia-cuda-mps"; argv[0] tells them apart).
        "mps_server_for_pipe": any((p["pipe_dir"] or DEFAULT_PIPE) == effective and p["cmd"].endswith("server")
                                   for p in procs),
        "mps_server_running": any(p["cmd"].endswith("server") for p in procs),
    }


def parse_smi_csv(text: str, fields: Sequence[str]) -> Optional[dict]:
    """The first line of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` as a dict
    (numbers as floats where they parse, but names and versions always text); None when no line
    has the right number of columns."""
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields):
            continue
        out = {}
        for k, v in zip(fields, parts):
            try:
                out[k] = v if k in TEXT_FIELDS else float(v)
            except ValueError:
                out[k] = v
        return out
    return None


# ---------------------------------------------------------------------------------------------
# Profiles

def gpu_ops(trace) -> List[dict]:
    """GPU work (kernels, memcpys, memsets) in a Chrome trace (dict with traceEvents, or a list),
    sorted by start: {name, ts, dur, end (us), corr (correlation id or None), cat}."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else (trace or [])
    ops = []
    for e in events:
        if not isinstance(e, dict):
            continue
        cat = str(e.get("cat", "")).lower()
        if cat not in GPU_CATS:
            continue
        try:
            ts = float(e["ts"])
            dur = max(0.0, float(e.get("dur", 0.0)))
        except (KeyError, TypeError, ValueError):
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        corr = args.get("correlation", args.get("correlation id"))
        ops.append({"name": str(e.get("name", "?")), "ts": ts, "dur": dur, "end": ts + dur,
                    "corr": corr, "cat": cat})
    ops.sort(key=lambda o: (o["ts"], o["end"]))
    return ops


def split_steps(ops: List[dict], steps: int) -> Tuple[List[List[dict]], str]:
    """The ops of each replay, in order, and how they were found ("correlation", "equal",
    "gaps" or "none")."""
    if not ops or steps <= 0:
        return [], "none"
    groups: Dict[object, List[dict]] = {}
    for o in ops:
        if o["corr"] is not None:
            groups.setdefault(o["corr"], []).append(o)
    big = [g for g in groups.values() if len(g) >= 2]
    if big:
        sizes = Counter(len(g) for g in big)
        # The replays' size: the commonest; among equally common, the largest.
        size = max(sizes, key=lambda s: (sizes[s], s))
        if sizes[size] >= max(1, steps // 2):
            chosen = [g for g in big if len(g) == size]
            chosen.sort(key=lambda g: g[0]["ts"])
            return chosen, "correlation"
    n = len(ops)
    if n % steps == 0:
        k = n // steps
        return [ops[i * k:(i + 1) * k] for i in range(steps)], "equal"
    if steps == 1:
        return [list(ops)], "gaps"
    # Cut at the steps-1 largest gaps: the host's synchronize between replays.
    gaps = sorted(range(1, n), key=lambda i: ops[i]["ts"] - ops[i - 1]["end"], reverse=True)
    cuts = sorted(gaps[:steps - 1])
    out, prev = [], 0
    for c in cuts + [n]:
        out.append(ops[prev:c])
        prev = c
    return out, "gaps"


def step_figures(step: List[dict]) -> dict:
    """One replay: sum of op durations, first start to last end, the gaps between consecutive ops
    (idle GPU time: start minus the latest end so far, never negative) and the mean start-to-start
    distance (us)."""
    step = sorted(step, key=lambda o: (o["ts"], o["end"]))
    busy = sum(o["dur"] for o in step)
    gaps = []
    last_end = step[0]["end"]
    for o in step[1:]:
        gaps.append(max(0.0, o["ts"] - last_end))
        last_end = max(last_end, o["end"])
    span = last_end - step[0]["ts"]
    s2s = (step[-1]["ts"] - step[0]["ts"]) / (len(step) - 1) if len(step) > 1 else None
    return {"ops": len(step), "kernel_sum_us": busy, "span_us": span, "gap_sum_us": sum(gaps),
            "gap_mean_us": sum(gaps) / len(gaps) if gaps else 0.0, "gap_max_us": max(gaps) if gaps else 0.0,
            "start_to_start_us": s2s, "gaps": gaps}


def analyze_profile(trace, steps: int) -> dict:
    """Per-replay and per-kernel-name figures of a profile of `steps` replays of one graph.

    kernels: one row per name, sorted by time per step (largest first): per_step (count in one
    replay), mean_us and p50_us (duration), per_step_us (time per replay), gap_before_mean_us (the
    GPU's idle time just before it starts, first op of a replay excluded)."""
    ops = gpu_ops(trace)
    groups, method = split_steps(ops, steps)
    res = {"steps_expected": steps, "ops_total": len(ops), "grouping": method, "steps_found": len(groups)}
    if not groups:
        res["error"] = "no GPU activity in the profile"
        return res
    figs = [step_figures(g) for g in groups]
    per_step = Counter(len(g) for g in groups)
    res["ops_per_step"] = max(per_step, key=lambda s: (per_step[s], s))
    res["step"] = {k: summary(f[k] for f in figs)
                   for k in ("kernel_sum_us", "span_us", "gap_sum_us", "gap_mean_us", "gap_max_us")}
    s2s = [f["start_to_start_us"] for f in figs if f["start_to_start_us"] is not None]
    res["step"]["start_to_start_us"] = summary(s2s)
    all_gaps = [x for f in figs for x in f["gaps"]]
    res["gap_us"] = summary(all_gaps)
    between = [max(0.0, groups[i + 1][0]["ts"] - max(o["end"] for o in groups[i])) for i in range(len(groups) - 1)]
    res["between_steps_us"] = summary(between)
    durs: Dict[str, List[float]] = {}
    gaps_before: Dict[str, List[float]] = {}
    for g, f in zip(groups, figs):
        g = sorted(g, key=lambda o: (o["ts"], o["end"]))
        for i, o in enumerate(g):
            durs.setdefault(o["name"], []).append(o["dur"])
            if i > 0:
                gaps_before.setdefault(o["name"], []).append(f["gaps"][i - 1])
    n = len(groups)
    rows = []
    for name, d in durs.items():
        s = summary(d)
        gb = gaps_before.get(name, [])
        rows.append({"name": name, "per_step": len(d) / n, "mean_us": s["mean"], "p50_us": s["p50"],
                     "per_step_us": sum(d) / n, "gap_before_mean_us": sum(gb) / len(gb) if gb else None})
    rows.sort(key=lambda r: r["per_step_us"], reverse=True)
    res["kernels"] = rows
    return res
