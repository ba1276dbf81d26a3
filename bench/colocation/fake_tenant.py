#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Stand-in for hp_server.py / be_train.py / be_infer.py with the same flags and JSON, no torch, no GPU.

  run_matrix.py --fake ...   runs the whole matrix with these, to test the orchestration (process
  groups, ready/start files, windows, SIGTERM handling, the report) on a machine without a GPU.
Latencies are made up (a lognormal from --seed: the same seed draws the same requests alone and
co-located); a co-runner (any other fake tenant alive) inflates them. Every result has request_log;
--calib-replay-s adds calib_replay (its TPOT x FAKE_SLOW_CALIB_FACTOR, default 1.5, when --seed is
among FAKE_SLOW_CALIB_SEEDS: a slow calibration injected for method v2's tests).
"""
from __future__ import annotations

import argparse
import glob
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def hp(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=0.0)
    ap.add_argument("--calibrate-load", type=float, default=0.0)
    ap.add_argument("--calibrate-s", type=float, default=1.0)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--start-file", default="")
    ap.add_argument("--load-step", default="")
    ap.add_argument("--json", required=True)
    ap.add_argument("--lengths", default="fixed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--calib-replay-s", type=float, default=0.0)
    a, _ = ap.parse_known_args(argv)
    stop = common.StopFlag()
    clock = common.WallClock()
    out = {"role": "hp", "ok": False, "torch": "fake", "fake": True,
           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "config": {"model": {"params": 1e9, "layers": 19, "hidden": 2048}, "prompt": 128,
                      "out_tokens": 32, "max_batch": 32, "cuda_graphs": True, "lengths": a.lengths,
                      "seed": a.seed}}
    time.sleep(0.3)   # "load + capture"
    rate = a.rate
    if a.calibrate_load:
        time.sleep(min(a.calibrate_s, 1.0))
        out["capacity_rps"] = 800.0
        out["calibration"] = {"capacity_rps": 800.0, "busy_fraction_at_saturation": 0.9}
        rate = a.calibrate_load * 800.0
    out["rate_rps"] = rate
    step = common.load_step_for(a.load_step, rate)
    if step:
        out["load_step"] = {"at_s": step[0], "rate_rps": step[1]}
    if a.calib_replay_s > 0:
        time.sleep(min(a.calib_replay_s, 0.2))
        crng = random.Random(a.seed + 2000)
        slow = (float(os.environ.get("FAKE_SLOW_CALIB_FACTOR", "1.5"))
                if str(a.seed) in os.environ.get("FAKE_SLOW_CALIB_SEEDS", "").split(",") else 1.0)
        c = [crng.lognormvariate(3.3, 0.25) for _ in range(max(20, int(rate * a.calib_replay_s)))]
        out["calib_replay"] = {"seconds": a.calib_replay_s, "seed": a.seed + 2000, "requests": len(c),
                               "unfinished": 0, "tpot_ms": common.stats(x / 33 * slow for x in c),
                               "ttft_ms": common.stats(x * 0.05 for x in c)}
    if a.start_file and not common.wait_for_file(a.start_file, 60):
        out["error"] = "start file never appeared"
        common.write_json_atomic(a.json, out)
        return 1
    co = "MPS" in os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "") or bool(a.start_file)
    t0 = time.perf_counter()
    end = t0 + a.duration
    while time.perf_counter() < end and not stop.stop:
        time.sleep(0.05)
    t1 = time.perf_counter()
    # The same seed draws the same requests (arrivals and standard normals) alone and co-located.
    rng = random.Random(a.seed)
    arr = common.poisson_arrivals(rate, 0.0, t1 - t0, 0, a.seed, step)
    n = len(arr)
    scale = 3.0 if co else 1.0
    e2e = [math.exp(3.3 + 0.25 * scale * rng.gauss(0.0, 1.0)) * (1.5 if co else 1.0) for _ in range(n)]
    ttft, tpot = [x * 0.05 for x in e2e], [x / 33 for x in e2e]
    out.update({"window": {"t0": clock.wall(t0), "t1": clock.wall(t1), "seconds": t1 - t0},
                "requests": n, "unfinished": 0, "aborted": stop.stop, "achieved_rps": n / (t1 - t0),
                "offered": n, "offered_rps": rate,
                "e2e_ms": common.stats(e2e), "ttft_ms": common.stats(ttft),
                "tpot_ms": common.stats(tpot), "e2e_cdf_ms": common.cdf_points(e2e),
                "busy_fraction": 0.62, "ok": True})
    out["ttft_admit_ms"] = common.stats(x * 0.8 for x in ttft)
    out["request_log"] = {"arrival_s": [round(x, 4) for x in arr], "ttft_ms": [round(x, 4) for x in ttft],
                          "tpot_ms": [round(x, 4) for x in tpot], "ttft_admit_ms": [round(x * 0.8, 4) for x in ttft]}
    common.write_json_atomic(a.json, out)
    return 0


def be(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--ready-file", default="")
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--ddp-gpus", default="")
    a, _ = ap.parse_known_args(argv)
    stop = common.StopFlag()
    slow = 2.0 if os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "50" else 1.0
    meta = {"kind": "train", "torch": "fake", "config": {"params_m": 350, "fake": True},
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if a.ddp_gpus:  # be_train.py --ddp-gpus: what its rank 0 reports (one process here)
        gpus = [int(g) for g in a.ddp_gpus.split(",")]
        meta.update({"kind": "ddp", "world_size": len(gpus), "gpus": gpus, "nccl_version": "0.0.0-fake"})
    prog = common.Progress(a.json, unit="steps/s", per_step=1.0, ready_file=a.ready_file,
                           warm_steps=a.warmup_steps, meta=meta)
    time.sleep(0.3)
    while not stop.stop:
        time.sleep(0.1 * slow)
        prog.tick()
    prog.write()
    return 0


if __name__ == "__main__":
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role == "hp":
        sys.exit(hp(sys.argv[2:]))
    if role == "be":
        sys.exit(be(sys.argv[2:]))
    print("usage: fake_tenant.py hp|be [hp_server/be_train flags]", file=sys.stderr)
    sys.exit(2)
