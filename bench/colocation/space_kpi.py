#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue #5's targets, judged from co-location runs: kpi.md and kpi.json.

  python3 bench/colocation/space_kpi.py MATRIX_DIR [MATRIX_DIR ...] --out DIR

Each MATRIX_DIR is a run_matrix.py output (raw.json). For every gpuos-space-* mode in them, against
the exclusive runs of the same matrix:
  - HP p99 within 1.05x of exclusive;
  - BE throughput above the idle-time share (1 - HP's busy fraction) of its exclusive throughput;
  - right-sizing (a guaranteed tenant gpuosd sized): at least 25% of its default SMs saved, at most
    4% kernel latency lost (as gpuosd measured it at the size it ended at).
Baseline modes of the same matrices are listed beside them, and exclusive-hp-again (HP alone once
more at the end: how far its exclusive latency drifted over the run). Exits 0 even when a target is missed:
it reports, the reader judges; 2 on unreadable input.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402

P99_LIMIT = 1.05
SAVED_MIN = 0.25
SIZED_LATENCY_MAX = 1.04


def _sm_mhz(mode: dict):
    """The median SM clock while the mode ran (run_matrix's nvidia-smi samples), or None."""
    return ((mode.get("gpu_state") or {}).get("sm_mhz") or {}).get("median")


def _sized(mode: dict):
    """The guaranteed tenant gpuosd right-sized (gpuos ps at the end of the mode), or None."""
    for t in ((mode.get("gpuos_ps") or {}).get("tenants") or []):
        if t.get("class") == "guaranteed" and t.get("space_default_sms"):
            return t
    return None


def judge(raw: dict, source: str) -> list[dict]:
    """The rows of one matrix: its summary (report.build_summary: the ratios to the exclusive
    runs) and, from the raw results, the GPU's clock and the sizer's outcome."""
    modes = raw.get("modes") or {}
    summary = report.build_summary(raw)
    excl_hp = modes.get("exclusive-hp") or {}
    rows = []
    for r in summary["modes"]:
        name, m = r["mode"], modes.get(r["mode"]) or {}
        # exclusive-hp-again (HP alone at the end of the run) is listed: its ratio is the drift.
        if (name.startswith("exclusive") and name != "exclusive-hp-again") or r["status"] != "ok":
            continue
        busy = r["hp_busy_fraction"]
        row = {"source": source, "load": summary["load"], "mode": name,
               "sm_mhz": _sm_mhz(m), "sm_mhz_exclusive": _sm_mhz(excl_hp),
               "hp_p99_ms": r["hp_p99_ms"], "hp_p99_vs_exclusive": r["hp_p99_vs_exclusive"],
               "be_vs_exclusive": r["be_vs_exclusive"],
               "be_target": None if busy is None else 1.0 - busy, "space": name.startswith("gpuos-space")}
        if row["space"]:
            r, b = row["hp_p99_vs_exclusive"], row["be_vs_exclusive"]
            row["p99_ok"] = r is not None and r <= P99_LIMIT
            row["be_ok"] = b is not None and row["be_target"] is not None and b >= row["be_target"]
            t = _sized(m)
            if t is not None:
                saved = (t["space_default_sms"] - t["space_sms"]) / t["space_default_sms"]
                lat = t.get("space_sized_latency")
                row.update(sized_sms=t["space_sms"], default_sms=t["space_default_sms"], saved=saved,
                           sized_latency=lat,
                           sizing_ok=saved >= SAVED_MIN and lat is not None and lat <= SIZED_LATENCY_MAX)
        rows.append(row)
    return rows


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def mark(ok):
    return "" if ok is None else (" ok" if ok else " MISS")


def render(rows: list[dict]) -> str:
    out = ["# Spatial sharing targets (issue #5)", "",
           f"HP p99 <= {P99_LIMIT}x exclusive; BE >= (1 - HP busy) of exclusive; right-sizing saves >= "
           f"{SAVED_MIN:.0%} of the default SMs at <= {SIZED_LATENCY_MAX}x kernel latency.", "",
           "| load | run | mode | HP p99 / excl | BE / excl | BE target | sized SMs | saved | sized latency "
           "| SM MHz (excl) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["load"] or 0, not r["space"], r["mode"], r["source"])):
        sized = "-" if "sized_sms" not in r else f"{r['sized_sms']}/{r['default_sms']}"
        clock = "-" if r.get("sm_mhz") is None else f"{r['sm_mhz']:.0f} ({fmt(r.get('sm_mhz_exclusive'), '.0f')})"
        out.append("| {} | {} | {} | {}{} | {}{} | {} | {} | {}{} | {} | {} |".format(
            fmt(r["load"], ".1f"), r["source"], r["mode"], fmt(r["hp_p99_vs_exclusive"]), mark(r.get("p99_ok")),
            fmt(r["be_vs_exclusive"]), mark(r.get("be_ok")), fmt(r["be_target"]), sized,
            fmt(r.get("saved"), ".0%"), mark(r.get("sizing_ok")), fmt(r.get("sized_latency")), clock))
    return "\n".join(out) + "\n"


def run_name(d: str) -> str:
    """A run's name: its folder's, or the parent's for run_matrix's own "matrix" folder."""
    d = os.path.abspath(d)
    base = os.path.basename(d)
    return os.path.basename(os.path.dirname(d)) if base == "matrix" else base


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="run_matrix.py output folders (each with raw.json)")
    ap.add_argument("--out", required=True, help="where kpi.md and kpi.json go")
    a = ap.parse_args(argv)
    rows = []
    for d in a.dirs:
        path = os.path.join(d, "raw.json")
        try:
            with open(path) as f:
                raw = json.load(f)
        except (OSError, ValueError) as e:
            print(f"space_kpi: {path}: {e}", file=sys.stderr)
            return 2
        rows += judge(raw, run_name(d))
    os.makedirs(a.out, exist_ok=True)
    text = render(rows)
    with open(os.path.join(a.out, "kpi.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "kpi.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
