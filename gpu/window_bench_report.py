#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gpu/window_bench.sh's report: the raw stamps of every run -> window_bench.json and window_bench.md.

What it computes (issue #56 item 3: how long an HP kernel waits to start while a BE kernel holds
the GPU). For each HP launch the program recorded [host CLOCK_REALTIME just before the launch call,
%globaltimer at the kernel's first block start, at its last block end, launch-to-sync-return ns].
  - launch-to-start = (gpu_start - host_launch) minus the minimum of the same over the process's
    calibration launches made alone (before its companion started): the clock offset and the
    launch path's own least latency removed, whatever the setting (MPS, gpuos) adds alone. With the
    minimum after the run as well (the companion gone), the offset is interpolated linearly in host
    time between the two: %globaltimer's rate may differ from the host clock's by some ppm;
  - raw launch-to-start: gpu_start - host_launch as is (meaningful where %globaltimer follows the
    host's CLOCK_REALTIME, as it does on recent drivers); its alone minimum is reported too;
  - e2e: launch call to cudaStreamSynchronize's return (host clock only);
  - wait (clock-free): e2e minus the kernel's own GPU time (end - start), minus its alone minimum:
    a check of launch-to-start that needs no clock alignment;
  - clock drift: the alone minimum after the companion stopped minus the one before (a
    %globaltimer resynchronised mid-run shows here, and as launch-to-start beyond e2e);
  - BE kernels/s: the companion's completions between HP's first and last release, against the
    calibrated alone rate (1000 / alone ms).
Context switch (outside MPS): ctx-idle and ctx-after-other against exclusive (p50 and p99 added),
and mid-kernel: time-slicing beside the longest BE kernel (its start delay is the time-slice
preemption; its minimum approaches the switch itself).

usage: window_bench_report.py --work DIR --out DIR --commit SHA [--commit-env SHA] --runs "NAMES"
Exit 0 when every planned run measured; 1 otherwise (the files are written either way).
"""

import argparse
import json
import os
import sys
import time

NO_STAMP = 2**64 - 1
MODES = ("time-slicing", "mps-prio", "gpuos-gate")  # <mode>-<be ms>
DRIFT_WARN_US = 10.0
IMPLAUSIBLE_SLACK_US = 5.0


def pct(xs, q):
    """The q-th percentile (0..100) by linear interpolation; None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stats(xs):
    if not xs:
        return {"n": 0, "p50": None, "p99": None, "max": None, "min": None, "mean": None}
    return {"n": len(xs), "p50": rnd(pct(xs, 50)), "p99": rnd(pct(xs, 99)), "max": rnd(max(xs)),
            "min": rnd(min(xs)), "mean": rnd(sum(xs) / len(xs))}


def rnd(x, digits=2):
    return None if x is None else round(x, digits)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, f"{os.path.basename(path)}: {e}"


def read_kv(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    out.setdefault(k, []).append(v)
    except OSError:
        pass
    return out


def valid(launch):
    host, start, end, e2e = launch
    return e2e > 0 and start != NO_STAMP and end != 0 and end >= start


def classify(name):
    """(mode, be key) for the table: modes by BE length; the rest are references."""
    if name == "exclusive":
        return "exclusive", "alone"
    for m in MODES:
        if name.startswith(m + "-"):
            return m, name[len(m) + 1:]
    return None, name


def hp_numbers(hp):
    """Everything about the HP's launches; (numbers, errors, warnings)."""
    errors, warnings = [], []
    pre = [x for x in hp.get("calib_pre", []) if valid(x)]
    post = [x for x in hp.get("calib_post", []) if valid(x)]
    rel_all = hp.get("releases", [])
    rel = [x for x in rel_all if valid(x)]
    if not pre:
        errors.append("no valid calibration launch")
        return None, errors, warnings
    if len(rel) < len(rel_all) or not rel:
        errors.append(f"{len(rel_all) - len(rel)} of {len(rel_all)} releases without stamps")
    if len(rel_all) < hp.get("releases_planned", len(rel_all)):
        errors.append(f"{len(rel_all)} releases of {hp['releases_planned']} planned")
    off_pre = min(s - h for h, s, e, d in pre)
    off_post = min(s - h for h, s, e, d in post) if post else None
    t_pre = pre[len(pre) // 2][0]
    t_post = post[len(post) // 2][0] if post else None

    def offset(h):  # the alone minimum at host time h
        if off_post is None or t_post <= t_pre:
            return off_pre
        return off_pre + (off_post - off_pre) * (h - t_pre) / (t_post - t_pre)

    wait_base = min(d - (e - s) for h, s, e, d in pre)
    l2s = [(s - h - offset(h)) / 1e3 for h, s, e, d in rel]
    raw = [(s - h) / 1e3 for h, s, e, d in rel]
    e2e = [d / 1e3 for h, s, e, d in rel]
    kern = [(e - s) / 1e3 for h, s, e, d in rel]
    wait = [(d - (e - s) - wait_base) / 1e3 for h, s, e, d in rel]
    implausible = sum(1 for a, b in zip(l2s, e2e) if a < -IMPLAUSIBLE_SLACK_US or a > b + IMPLAUSIBLE_SLACK_US)
    drift = None if off_post is None else (off_post - off_pre) / 1e3
    if drift is None:
        warnings.append("no calibration after the run: the clock alignment's drift is unknown")
    elif abs(drift) > DRIFT_WARN_US:
        warnings.append(f"clock alignment drifted {drift:.1f} us during the run (interpolated; a step of a "
                        "resynchronised %globaltimer is not linear): check against hp_wait_clockfree_us")
    if implausible:
        warnings.append(f"{implausible} releases with launch-to-start below -{IMPLAUSIBLE_SLACK_US:g} us or "
                        "beyond their e2e (clock alignment)")
    if not hp.get("quiet_seen", True):
        warnings.append("the post-run calibration ran before the companion was gone")
    n = {
        "releases": len(rel),
        "hp_launch_to_start_us": stats(l2s),
        "hp_launch_to_start_raw_us": stats(raw),
        "hp_e2e_us": stats(e2e),
        "hp_kernel_us": stats(kern),
        "hp_wait_clockfree_us": stats(wait),
        "clock": {"alone_min_raw_us": rnd(off_pre / 1e3), "alone_min_raw_after_us": rnd(
            None if off_post is None else off_post / 1e3), "drift_us": rnd(drift), "implausible": implausible,
            "calib_launches": [len(pre), len(post)]},
        "hp_alone_e2e_us": stats([d / 1e3 for h, s, e, d in pre]),
    }
    return n, errors, warnings


def be_numbers(be, hp, alone_ms):
    errors = []
    if be.get("error"):
        errors.append(f"companion: {be['error']}")
    go, end = hp.get("go_rt_ns") or 0, hp.get("released_rt_ns") or 0
    done = be.get("completions_rt_ns", [])
    out = {"kind": be.get("kind"), "kernels_total": be.get("kernels"), "mps_priority": be.get("mps_priority")}
    if go and end > go:
        k = sum(1 for t in done if go <= t <= end)
        secs = (end - go) / 1e9
        out.update(kernels_in_window=k, window_s=rnd(secs, 3), kernels_per_s=rnd(k / secs, 1))
        if be.get("kind") == "run" and alone_ms:
            out["share_of_alone"] = rnd(k / secs * alone_ms / 1000.0, 3)
            if k == 0:
                errors.append("the BE finished no kernel during HP's releases")
    return out, errors


def gpuos_numbers(ps, name):
    """The two tenants of a gpuos run as gpuosd saw them; (numbers, errors if either was not
    governed, warnings)."""
    if ps is None:
        return None, ["no `gpuos ps` record (gpuosd's view of the tenants)"], []
    by = {t.get("name"): t for t in ps.get("tenants", [])}
    out, errors, warnings = {}, [], []
    for role, cls in (("hp", "guaranteed"), ("be", "best-effort")):
        t = by.get(f"{role}-{name}")
        if t is None:
            if role == "hp" or not name.startswith("exclusive"):
                errors.append(f"gpuosd has no tenant {role}-{name}")
            continue
        out[role] = {k: t.get(k) for k in ("class", "launches", "gate_waits", "gate_wait_ns", "state")}
        if t.get("class") != cls:
            errors.append(f"{role}-{name} registered as {t.get('class')}, not {cls}")
        if not t.get("launches"):
            errors.append(f"gpuosd counted no launch of {role}-{name}")
        if role == "be" and t.get("launches") and not t.get("gate_waits"):
            warnings.append("gpuosd never held the BE at its gate (gate_waits 0)")
    return out, errors, warnings


def build(a):
    work = a.work
    calib, cerr = load_json(os.path.join(work, "calibrate.json"))
    settings = {k: v[-1] for k, v in read_kv(os.path.join(work, "settings.txt")).items()}
    ps, _ = load_json(os.path.join(work, "logs", "gpuos-ps.json"))
    errors = []
    if calib is None or calib.get("error"):
        errors.append(f"calibration: {cerr or calib.get('error')}")
        calib = calib or {}
    alone = {float(b["target_ms"]): b for b in calib.get("be", [])}
    out = {
        "benchmark": "window_bench (issue #56 item 3)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "card": calib.get("device"),
        "driver_version": settings.get("driver_version"),
        "cuda_driver_api": calib.get("cuda_driver_api"),
        "sm_count": calib.get("sm_count"),
        "commit": a.commit,
        "settings": {
            "releases": int(float(settings.get("releases", 0))), "calib_launches": int(float(settings.get("calib", 0))),
            "gap_ms": [float(settings.get("gap_min_ms", 0)), float(settings.get("gap_max_ms", 0))],
            "ping_us": float(settings.get("ping_us", 0)), "seed": settings.get("seed"),
            "be_waves": int(float(settings.get("be_waves", 1))),
            "hp": calib.get("hp"), "be_grid": {"blocks": (calib.get("be") or [{}])[0].get("blocks"),
                                              "threads": (calib.get("be") or [{}])[0].get("threads")},
        },
        "calibration": {"hp_kernel_alone_us": (calib.get("hp") or {}).get("us"),
                        "be": [{"target_ms": b["target_ms"], "iters": b["iters"], "alone_ms": b["ms"],
                                "alone_ms_range": [b["ms_min"], b["ms_max"]]} for b in calib.get("be", [])],
                        "globaltimer": calib.get("globaltimer")},
        "modes": {"exclusive": {}, **{m: {} for m in MODES}},
        "references": {},
        "context_switch": {},
        "warnings": [],
        "errors": errors,
    }
    if a.commit_env and a.commit_env != a.commit:
        out["commit_env"] = a.commit_env
    for name in a.runs.split():
        d = os.path.join(work, "runs", name)
        meta = {k: v[-1] for k, v in read_kv(os.path.join(d, "meta.txt")).items()}
        row_errors = read_kv(os.path.join(d, "meta.txt")).get("error", [])
        be_ms = meta.get("be_ms", "-")
        alone_ms = alone.get(float(be_ms), {}).get("ms") if be_ms not in ("-", "") else None
        row = {"run": name, "setting": meta.get("setting"), "companion": meta.get("companion"),
               "be_ms_target": None if be_ms in ("-", "") else float(be_ms), "be_kernel_alone_ms": alone_ms}
        warnings = []
        hp, herr = load_json(os.path.join(d, "hp.json"))
        if hp is None:
            if not row_errors:
                row_errors.append(herr or "no HP record")
        else:
            if hp.get("error"):
                row_errors.append(f"HP: {hp['error']}")
            n, e, w = hp_numbers(hp)
            row_errors += e
            warnings += w
            if n:
                row.update(n)
            if meta.get("companion") not in (None, "none"):
                be, berr = load_json(os.path.join(d, "be.json"))
                if be is None:
                    row_errors.append(berr or "no companion record")
                else:
                    b, e = be_numbers(be, hp, alone_ms)
                    row["companion_numbers"] = b
                    row["be_kernels_per_s"] = b.get("kernels_per_s")
                    row["be_share_of_alone"] = b.get("share_of_alone")
                    row_errors += e
        if meta.get("setting") == "mps":
            row["mps_server"] = meta.get("mps_server")
            if meta.get("mps_server") == "not seen":
                warnings.append("no nvidia-cuda-mps-server with our pipe directory was seen while the run's "
                                "processes were up (check mps logs: did they join MPS?)")
        if meta.get("setting") == "gpuos" and hp is not None:
            g, e, w = gpuos_numbers(ps, name)
            row["gpuos_tenants"] = g
            row_errors += e
            warnings += w
        row["ok"] = not row_errors
        row["errors"] = row_errors
        row["warnings"] = warnings
        out["errors"] += [f"{name}: {x}" for x in row_errors]
        out["warnings"] += [f"{name}: {x}" for x in warnings]
        mode, key = classify(name)
        if mode:
            out["modes"][mode][key] = row
        else:
            out["references"][name] = row
    out["context_switch"] = context_switch(out)
    mps_log = os.path.join(work, "logs", "mps", "control.log")
    if os.path.exists(mps_log):
        with open(mps_log, errors="replace") as fp:
            text = fp.read().lower()
        # Evidence that the mps runs' processes joined MPS (the control daemon's own account).
        out["mps_control_log"] = {"new_client_lines": text.count("new client"),
                                  "new_server_lines": text.count("starting new server")}
    out["ok"] = not out["errors"]
    return out


def l2s(row, q):
    return ((row or {}).get("hp_launch_to_start_us") or {}).get(q)


def context_switch(out):
    excl = out["modes"]["exclusive"].get("alone")
    refs = out["references"]
    cs = {"method": "HP launch-to-start beside the other process minus HP alone (exclusive), at p50 and p99; "
                    "mid_kernel: time-slicing beside the longest BE kernel"}

    def added(row, label):
        if not row or l2s(row, "p50") is None or l2s(excl, "p50") is None:
            cs[label + "_us"] = None
            return
        cs[label + "_us"] = rnd(l2s(row, "p50") - l2s(excl, "p50"))
        cs[label + "_p99_us"] = rnd(l2s(row, "p99") - l2s(excl, "p99"))
        cs[label + "_detail"] = row["hp_launch_to_start_us"]

    added(refs.get("ctx-idle"), "idle")
    added(refs.get("ctx-after-other"), "after_other")
    ts = out["modes"]["time-slicing"]
    longest = max(ts, key=float) if ts else None
    added(ts.get(longest) if longest else None, "mid_kernel")
    cs["mid_kernel_be_ms"] = float(longest) if longest else None
    cs["exclusive_detail"] = excl["hp_launch_to_start_us"] if excl and "hp_launch_to_start_us" in excl else None
    return cs


def f(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def markdown(out):
    s = out["settings"]
    cal = out["calibration"]
    gt = (cal.get("globaltimer") or {})
    lines = [
        "# window_bench: HP launch-to-start beside a BE kernel (issue #56 item 3)",
        "",
        f"{out.get('card')}, driver {out.get('driver_version')}, {out.get('sm_count')} SMs; commit "
        f"{out.get('commit')}; {out.get('date')}.",
        f"HP: {(s.get('hp') or {}).get('blocks')} blocks x {(s.get('hp') or {}).get('threads')} threads, "
        f"{f(cal.get('hp_kernel_alone_us'))} us alone; {s['releases']} releases a run at uniform random gaps in "
        f"[{s['gap_ms'][0]:g}, {s['gap_ms'][1]:g}] ms. BE: {s['be_grid']['blocks']} blocks x "
        f"{s['be_grid']['threads']} threads (one wave fills every SM), 2 in flight; alone "
        + ", ".join(f"{b['target_ms']:g} ms -> {b['alone_ms']:.3f} ms" for b in cal.get("be", []))
        + f". %globaltimer step {gt.get('min_step_ns')} ns.",
        "",
        "Launch-to-start: GPU start minus host launch, less the process's own alone minimum (clock "
        "offset). Wait (clock-free): e2e minus the kernel's GPU time, less its alone minimum.",
        "",
        "| mode | BE kernel (alone) | HP launch-to-start p50 / p99 / max (us) | HP e2e p50 / p99 (us) | "
        "wait clock-free p50 / p99 (us) | BE kernels/s (share of alone) | ok |",
        "|---|---|---|---|---|---|---|",
    ]

    def row_line(label, key, r):
        t, e, w = r.get("hp_launch_to_start_us") or {}, r.get("hp_e2e_us") or {}, r.get("hp_wait_clockfree_us") or {}
        be = r.get("be_kernel_alone_ms")
        be_txt = "-" if r.get("be_ms_target") is None else f"{r['be_ms_target']:g} ms ({f(be, 3)})"
        kps = r.get("be_kernels_per_s")
        share = r.get("be_share_of_alone")
        kps_txt = "-" if kps is None else f"{kps:.1f}" + ("" if share is None else f" ({share:.2f})")
        if r.get("companion") in ("idle", "ping") and kps is not None:
            kps_txt = f"{kps:.0f} pings/s" if r["companion"] == "ping" else "idle"
        ok = "ok" if r.get("ok") else "FAILED"
        return (f"| {label} | {be_txt} | {f(t.get('p50'))} / {f(t.get('p99'))} / {f(t.get('max'))} | "
                f"{f(e.get('p50'))} / {f(e.get('p99'))} | {f(w.get('p50'))} / {f(w.get('p99'))} | {kps_txt} | {ok} |")

    for mode in ("exclusive",) + MODES:
        for key, r in sorted(out["modes"][mode].items(), key=lambda kv: (kv[0] != "alone", float(kv[0]) if kv[0] != "alone" else 0)):
            lines.append(row_line(mode, key, r))
    for name, r in out["references"].items():
        lines.append(row_line(name, name, r))
    cs = out["context_switch"]
    lines += [
        "",
        "Context switch outside MPS (HP launch-to-start added over exclusive, p50 / p99):",
        f"- idle (the other process holds a context, runs nothing): {f(cs.get('idle_us'))} / "
        f"{f(cs.get('idle_p99_us'))} us",
        f"- after the other's tiny kernel (it runs one every {s['ping_us']:g} us): {f(cs.get('after_other_us'))} / "
        f"{f(cs.get('after_other_p99_us'))} us",
        f"- mid-kernel (time-slicing beside the {f(cs.get('mid_kernel_be_ms'), 0)} ms BE kernel): "
        f"{f(cs.get('mid_kernel_us'))} / {f(cs.get('mid_kernel_p99_us'))} us; its min "
        f"{f((cs.get('mid_kernel_detail') or {}).get('min'))} us, max {f((cs.get('mid_kernel_detail') or {}).get('max'))} us",
    ]
    if out["warnings"]:
        lines += ["", "Warnings:"] + [f"- {w}" for w in out["warnings"]]
    lines += ["", "Verdict: " + ("every run measured." if out["ok"] else "FAILED:")]
    lines += [f"- {e}" for e in out["errors"]]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--commit-env", default="")
    p.add_argument("--runs", required=True)
    a = p.parse_args()
    out = build(a)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "window_bench.json"), "w") as fp:
        json.dump(out, fp, indent=1)
    md = markdown(out)
    with open(os.path.join(a.out, "window_bench.md"), "w") as fp:
        fp.write(md)
    print(md)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
