#!/usr/bin/env python3
"""Co-location report: summary.json, summary.md, cdf.png and be.png from the runner's raw.json.

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

SUMMARY_FIELDS = ["mode", "hp_p50_ms", "hp_p99_ms", "hp_p99_vs_exclusive", "hp_ttft_p50_ms",
                  "hp_ttft_p99_ms", "hp_tpot_p50_ms", "hp_tpot_p99_ms", "hp_requests", "be_throughput",
                  "be_unit", "be_vs_exclusive", "hp_busy_fraction"]


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


def build_summary(raw: dict) -> dict:
    meta = raw.get("meta", {})
    modes = raw.get("modes", {})
    min_req = meta.get("min_requests", 300)
    excl_hp = modes.get("exclusive-hp", {})
    excl_be = modes.get("exclusive-be", {})
    hp_p99_excl = _get(excl_hp, "hp", "e2e_ms", "p99")
    be_excl = excl_be.get("be_rate")
    busy = excl_hp.get("hp_busy_fraction")
    be_unit = excl_be.get("be_unit")
    rows = []
    torch_v = None
    hp_cfg = be_cfg = None
    notes = []
    for name in meta.get("modes_planned", list(modes)):
        rec = modes.get(name)
        if rec is None:
            continue
        hp = rec.get("hp") or {}
        torch_v = torch_v or hp.get("torch") or _get(rec, "be", "torch")
        hp_cfg = hp_cfg or hp.get("config")
        be_cfg = be_cfg or _get(rec, "be", "config")
        row = {
            "mode": name,
            "hp_p50_ms": _get(hp, "e2e_ms", "p50"),
            "hp_p99_ms": _get(hp, "e2e_ms", "p99"),
            "hp_p99_vs_exclusive": _ratio(_get(hp, "e2e_ms", "p99"), hp_p99_excl),
            "hp_ttft_p50_ms": _get(hp, "ttft_ms", "p50"),
            "hp_ttft_p99_ms": _get(hp, "ttft_ms", "p99"),
            "hp_tpot_p50_ms": _get(hp, "tpot_ms", "p50"),
            "hp_tpot_p99_ms": _get(hp, "tpot_ms", "p99"),
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
        rows.append(row)
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
        "gpu": _get(meta, "gpu", "name"),
        "driver_version": _get(meta, "gpu", "driver_version"),
        "torch_version": torch_v,
        "load": meta.get("load"),
        "capacity_rps": raw.get("capacity_rps"),
        "hp_rate_rps": raw.get("hp_rate_rps"),
        "workload": {"kind": meta.get("workload"), "be": meta.get("be"), "hp": hp_cfg, "be_config": be_cfg},
        "min_requests": min_req,
        "min_requests_ok": all_ok,
        "hp_busy_fraction": busy,
        "wall_s": meta.get("wall_s"),
        "interrupted": meta.get("interrupted"),
        "notes": notes,
        "modes": rows,
    }


def markdown(s: dict) -> str:
    f = common.fmt
    out = [f"# Co-location results: {s.get('label')} ({s.get('date')})", ""]
    out.append(f"GPU {s.get('gpu')}, driver {s.get('driver_version')}, torch {s.get('torch_version')}. "
               f"HP load {s.get('load')} of capacity {f(s.get('capacity_rps'))} req/s "
               f"= {f(s.get('hp_rate_rps'))} req/s offered.")
    wl = s.get("workload") or {}
    hp = wl.get("hp") or {}
    model = hp.get("model") or {}
    if model:
        out.append(f"HP: Llama-shaped {model.get('params', 0) / 1e9:.2f}B ({model.get('layers')} layers, "
                   f"hidden {model.get('hidden')}), prompt {hp.get('prompt')}, {hp.get('out_tokens')} "
                   f"output tokens, max batch {hp.get('max_batch')}, CUDA graphs {hp.get('cuda_graphs')}.")
    bec = wl.get("be_config") or {}
    if bec:
        out.append("BE (" + str(wl.get("be")) + "): " + ", ".join(f"{k} {v}" for k, v in bec.items()
                                                               if not isinstance(v, dict)) + ".")
    out.append("")
    out.append("| mode | HP p50 ms | HP p99 ms | p99 / excl | TTFT p99 ms | TPOT p99 ms | HP requests "
               "| BE throughput | BE / excl | status |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in s.get("modes", []):
        be = f(r["be_throughput"]) + (f" {r['be_unit']}" if r["be_throughput"] is not None else "")
        st = r.get("status") or ""
        if r.get("error"):
            st += ": " + str(r["error"]).replace("|", "/").replace("\n", " ")[:120]
        out.append(f"| {r['mode']} | {f(r['hp_p50_ms'])} | {f(r['hp_p99_ms'])} | "
                   f"{f(r['hp_p99_vs_exclusive'])} | {f(r['hp_ttft_p99_ms'])} | {f(r['hp_tpot_p99_ms'])} | "
                   f"{f(r['hp_requests'])} | {be} | {f(r['be_vs_exclusive'])} | {st} |")
    out.append("")
    for n in s.get("notes", []):
        out.append(f"- {n}")
    for r in s.get("modes", []):
        for n in r.get("notes") or []:
            out.append(f"- {r['mode']}: {n}")
    if s.get("interrupted"):
        out.append(f"- run interrupted: {s['interrupted']}")
    out.append("")
    return "\n".join(out)


def plot(raw: dict, s: dict, out_dir: str) -> list:
    """cdf.png and be.png; returns the files written (none without matplotlib)."""
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
    fig.tight_layout()
    p = os.path.join(out_dir, "cdf.png")
    fig.savefig(p, dpi=120)
    plt.close(fig)
    written.append(p)

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
    fig.tight_layout()
    p = os.path.join(out_dir, "be.png")
    fig.savefig(p, dpi=120)
    plt.close(fig)
    written.append(p)
    return written


def write_all(raw: dict, out_dir: str, plots: bool = True) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    s = build_summary(raw)
    common.write_json_atomic(os.path.join(out_dir, "summary.json"), s)
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
