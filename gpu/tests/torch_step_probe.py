# SPDX-License-Identifier: Apache-2.0
"""Probe: how long one decode step of the suite's PyTorch HP takes, in a closed loop (no queueing).

The co-location suite's HP server (bench/colocation/llama.py, Llama-shaped 1B, bf16) replays one
CUDA graph per decode step. This times STEPS decode steps of one batch bucket back to back, each
from replay to synchronize (what the server waits for), with CUDA graphs and then eagerly, so
gpu/spatial_service.sh can say what MPS, a partition and a busy neighbour each cost this kind of
work (memory-bound, thousands of small kernels a second) next to the synthetic HP's.

usage: torch_step_probe.py [--batch 8] [--steps 600] [--params-b 1.0] [--name N] --json OUT
Writes one line of JSON: p50_us/p99_us/mean_us of the graph steps, eager_p50_us/eager_p99_us,
kernels (steps timed), verified (the outputs are finite).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "colocation"))


def timed_steps(torch, step, steps: int, warmup: int) -> list:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def pct(xs: list, q: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8, help="decode bucket (active requests)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--params-b", type=float, default=1.0)
    ap.add_argument("--name", default="hp")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    res = {"name": a.name, "batch": a.batch, "verified": False}
    try:
        import torch
        import llama
        cfg = llama.config_for_params(a.params_b)
        eng = llama.Engine(cfg, max_slots=a.batch + 1, prompt_len=128, max_new=32, device="cuda",
                           dtype=torch.bfloat16, max_prefill=1)
        eng.prepare([a.batch], [1], use_graphs=True)
        graph = timed_steps(torch, lambda: eng.decode(a.batch), a.steps, a.warmup)
        eager = timed_steps(torch, lambda: eng._decode(a.batch), a.steps, a.warmup)
        res.update(p50_us=pct(graph, 0.5), p99_us=pct(graph, 0.99), mean_us=round(sum(graph) / len(graph), 1),
                   eager_p50_us=pct(eager, 0.5), eager_p99_us=pct(eager, 0.99), kernels=len(graph) + len(eager),
                   verified=bool(torch.isfinite(eng.kcache[:, : a.batch]).all().item()))
    except Exception as e:  # the result file says what failed
        res["error"] = f"{type(e).__name__}: {e}"
    with open(a.json, "w") as f:
        f.write(json.dumps(res) + "\n")
    print(json.dumps(res), flush=True)
    return 0 if res["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
