# SPDX-License-Identifier: Apache-2.0
"""Summaries of multi_model.py's runs: per-server metrics, the best static split, the gain, the table.

No torch (unit-tested in test_kv_logic.py).

A mode's TTFT p99 is the worst of its servers' TTFT p99 (a split is as good as its worst-served
model); a mode with a failed or missing server has none and cannot be the best.
ttft_p99_gain = best static split's TTFT p99 / gpuos-elastic's (above 1: elastic is better).
A mode's throughput is its servers' tokens/s summed; throughput_ratio = gpuos-elastic's / the best
static split's (at least 1: equal or better throughput).
"""
from __future__ import annotations

from typing import Dict, List, Optional

STATIC_PREFIX = "static-"
ELASTIC_MODE = "gpuos-elastic"


def _p(d: Optional[dict], key: str) -> Optional[float]:
    return (d or {}).get(key)


def server_metrics(js: Optional[dict]) -> dict:
    """The fields of one paged_server.py result that the summary keeps (None where missing)."""
    js = js or {}
    pool = js.get("pool") or {}
    mc = js.get("map_calls") or {}
    return {
        "ok": bool(js.get("ok")),
        "error": js.get("error"),
        "requests": js.get("requests"),
        "unfinished": js.get("unfinished"),
        "ttft_p50_ms": _p(js.get("ttft_ms"), "p50"),
        "ttft_p99_ms": _p(js.get("ttft_ms"), "p99"),
        "tpot_p99_ms": _p(js.get("tpot_ms"), "p99"),
        "tokens_per_s": js.get("tokens_per_s"),
        "requests_per_s": js.get("requests_per_s"),
        "preemptions": js.get("preemptions"),
        "pages_mapped": js.get("pages_mapped"),
        "pages_unmapped": js.get("pages_unmapped"),
        "map_refusals": js.get("map_refusals"),
        "max_blocks_used": js.get("max_blocks_used"),
        "max_kv_gib_used": js.get("max_kv_gib_used"),
        "kv_blocked_steps": js.get("kv_blocked_steps"),
        "ooms": js.get("ooms"),
        "mismatches": js.get("mismatches"),
        "grow_ms_per_gib": js.get("grow_ms_per_gib"),
        "map_call_p99_ms": _p(mc.get("ms"), "p99"),
        "resident_gib_end": (pool["resident_bytes"] / 2**30) if pool.get("resident_bytes") is not None else None,
    }


def mode_ttft_p99(servers: Dict[str, dict]) -> Optional[float]:
    """Worst server TTFT p99 of a mode; None if any server failed or has none."""
    if not servers:
        return None
    vals = []
    for m in servers.values():
        if not m.get("ok") or m.get("ttft_p99_ms") is None:
            return None
        vals.append(m["ttft_p99_ms"])
    return max(vals)


def best_static(modes: Dict[str, dict]) -> Optional[str]:
    """The static mode with the lowest TTFT p99 (worst server), or None."""
    best, best_v = None, None
    for name, m in modes.items():
        if not name.startswith(STATIC_PREFIX):
            continue
        v = m.get("ttft_p99_ms")
        if v is None:
            continue
        if best_v is None or v < best_v:
            best, best_v = name, v
    return best


def gain(static_p99: Optional[float], elastic_p99: Optional[float]) -> Optional[float]:
    if static_p99 is None or elastic_p99 is None or elastic_p99 <= 0:
        return None
    return static_p99 / elastic_p99


def mode_tokens_per_s(servers: Dict[str, dict]) -> Optional[float]:
    """The servers' tokens/s summed; None if any server failed or has none."""
    vals = [m.get("tokens_per_s") if m.get("ok") else None for m in servers.values()]
    if not vals or any(v is None for v in vals):
        return None
    return float(sum(vals))


def _sum_field(modes: Dict[str, dict], key: str) -> Optional[int]:
    vals = [s.get(key) for m in modes.values() for s in (m.get("servers") or {}).values()]
    vals = [v for v in vals if v is not None]
    return sum(vals) if vals else None


def summarize(modes: Dict[str, dict], meta: dict) -> dict:
    """modes: name -> {"servers": {server: server_metrics}, ...}. Adds each mode's ttft_p99_ms and
    the top-level verdict."""
    for m in modes.values():
        m["ttft_p99_ms"] = mode_ttft_p99(m.get("servers") or {})
        m["tokens_per_s"] = mode_tokens_per_s(m.get("servers") or {})
    b = best_static(modes)
    el = modes.get(ELASTIC_MODE)
    out = dict(meta)
    out["best_static"] = b
    out["best_static_ttft_p99_ms"] = modes[b]["ttft_p99_ms"] if b else None
    out["elastic_ttft_p99_ms"] = el["ttft_p99_ms"] if el else None
    out["ttft_p99_gain"] = gain(out["best_static_ttft_p99_ms"], out["elastic_ttft_p99_ms"])
    out["best_static_tokens_per_s"] = modes[b]["tokens_per_s"] if b else None
    out["elastic_tokens_per_s"] = el["tokens_per_s"] if el else None
    out["throughput_ratio"] = gain(out["elastic_tokens_per_s"], out["best_static_tokens_per_s"])
    out["mismatches"] = _sum_field(modes, "mismatches")
    out["ooms"] = _sum_field(modes, "ooms")
    out["modes"] = modes
    return out


def markdown(summary: dict) -> str:
    def f(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)
    lines = [f"# KV memory: static splits vs gpuos-elastic ({summary.get('gpu') or 'unknown GPU'})", "",
             f"- best static split: {summary.get('best_static')} (TTFT p99 {f(summary.get('best_static_ttft_p99_ms'))} ms)",
             f"- gpuos-elastic: TTFT p99 {f(summary.get('elastic_ttft_p99_ms'))} ms",
             f"- ttft_p99_gain (best static / elastic): {f(summary.get('ttft_p99_gain'))}",
             f"- throughput: elastic {f(summary.get('elastic_tokens_per_s'))} tok/s, best static "
             f"{f(summary.get('best_static_tokens_per_s'))} tok/s (ratio {f(summary.get('throughput_ratio'))})",
             f"- mismatches: {f(summary.get('mismatches'))}, ooms: {f(summary.get('ooms'))}", "",
             "| mode | server | KV GiB | TTFT p50 ms | TTFT p99 ms | TPOT p99 ms | tok/s | req/s | preempt | max KV GiB | unfinished | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, m in (summary.get("modes") or {}).items():
        kv = m.get("kv_gib") or {}
        for s, x in (m.get("servers") or {}).items():
            status = "ok" if x.get("ok") else (x.get("error") or "failed")[:60]
            lines.append(f"| {name} | {s} | {f(kv.get(s))} | {f(x.get('ttft_p50_ms'))} | {f(x.get('ttft_p99_ms'))} | "
                         f"{f(x.get('tpot_p99_ms'))} | {f(x.get('tokens_per_s'))} | {f(x.get('requests_per_s'))} | "
                         f"{f(x.get('preemptions'))} | {f(x.get('max_kv_gib_used'))} | {f(x.get('unfinished'))} | {status} |")
        if m.get("error"):
            lines.append(f"| {name} | - | - | - | - | - | - | - | - | - | - | {m['error'][:80]} |")
    return "\n".join(lines) + "\n"
