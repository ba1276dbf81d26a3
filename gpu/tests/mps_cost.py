#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where MPS's own cost to a graph-replayed decode step goes (issue #23), kernel by kernel.

Builds the co-location suite's Llama-shaped engine (bench/colocation/llama.py; 8B shape by
default, bf16, decode bucket 8, one CUDA graph per step as hp_server.py replays it), then:
  timed     N replays, each timed with CUDA events (replay to end) and on the host (replay to
            synchronize: what the server waits for), the SM clock sampled all along (nvidia-smi)
  profile   M replays under torch.profiler (CUDA activity, CUPTI): per kernel name its count per
            step, mean and p50 duration, the GPU's idle time just before it; per step the kernel
            time, first start to last end, and the gaps between consecutive kernels
  micro     a graph of K tiny kernels (x.add_(1) on 1024 floats: one block) and one of K wide
            ones (4M floats), replayed: time per kernel (events) and, profiled, each kernel's
            duration, the gap between kernels and the start-to-start distance
  bandwidth a 1 GiB read (sum) and a 1 GiB copy, timed with events
Whether the process is an MPS client is decided by its environment (CUDA_MPS_PIPE_DIRECTORY and
a control daemon listening there), which the JSON records with every CUDA_* variable; --variant
only labels the run. gpu/mps_cost.sh runs it with and without MPS and with tenant-side settings;
gpu/mps_cost_report.py compares the runs.

usage: mps_cost.py --variant NAME --json OUT [--steps 400] [--profile-steps 50] [--params-b 8]
Always writes OUT (with "error" when something failed); exit 0 when the timed part ran.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "colocation"))
import gpu_state  # noqa: E402  (torch-free: nvidia-smi sampler)
import mps_cost_lib as lib  # noqa: E402

SMI_FIELDS = ("name", "driver_version", "compute_mode", "clocks.sm", "clocks.max.sm", "clocks.mem",
              "temperature.gpu", "power.draw")


def smi(fields=SMI_FIELDS):
    """One nvidia-smi reading of GPU 0 (None without nvidia-smi or on any failure; the name and
    driver alone when a field is unknown to this driver)."""
    for query in (fields, ("name", "driver_version")):
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(query), "--format=csv,noheader,nounits",
                                "-i", "0"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        got = lib.parse_smi_csv(r.stdout, query) if r.returncode == 0 else None
        if got is not None:
            return got
    return None


def torch_clock(torch):
    """torch.cuda.clock_rate (SM MHz through pynvml) where it exists and works, else None."""
    try:
        return float(torch.cuda.clock_rate(0))
    except Exception:  # noqa: BLE001 - missing pynvml, old torch: just not recorded
        return None


def time_replays(torch, fn, n: int, warmup: int) -> dict:
    """n calls of fn (one graph replay each), each waited for: event ms (GPU: record before to
    record after), host ms (call to synchronize) and launch us (the call itself)."""
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev, host, launch = [], [], []
    for _ in range(n):
        t0 = time.perf_counter()
        e0.record()
        fn()
        t1 = time.perf_counter()
        e1.record()
        e1.synchronize()
        t2 = time.perf_counter()
        ev.append(e0.elapsed_time(e1))
        host.append((t2 - t0) * 1e3)
        launch.append((t1 - t0) * 1e6)
    return {"n": n, "event_ms": ev, "host_ms": host, "launch_us": launch}


def profile_trace(torch, body, workdir: str, tag: str, keep: str = ""):
    """Run body() under torch.profiler (CUDA activity only) and return the Chrome trace as a dict."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        body()
        torch.cuda.synchronize()
    path = os.path.join(workdir, f"{tag}.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    if keep:
        os.replace(path, keep)
    else:
        os.unlink(path)
    return trace


def replays(torch, fn, m: int):
    def body():
        for _ in range(m):
            fn()
            torch.cuda.synchronize()   # as the server: one step at a time
    return body


def capture(torch, body) -> "torch.cuda.CUDAGraph":
    """Warm body up on a side stream, then capture it into a new graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    torch.cuda.synchronize()
    return g


def micro(torch, n_elems: int, k: int, reps: int, prof_reps: int, workdir: str) -> dict:
    """A graph of k x.add_(1) kernels on n_elems floats, replayed."""
    x = torch.zeros(n_elems, device="cuda", dtype=torch.float32)

    def body():
        for _ in range(k):
            x.add_(1.0)
    g = capture(torch, body)
    t = time_replays(torch, g.replay, reps, warmup=5)
    per_kernel = [ms * 1e3 / k for ms in t["event_ms"]]
    res = {"elements": n_elems, "kernels": k, "replays": reps,
           "event_us_per_kernel": lib.summary(per_kernel)}
    try:
        an = lib.analyze_profile(profile_trace(torch, replays(torch, g.replay, prof_reps), workdir, f"micro{n_elems}"),
                                 prof_reps)
        st = an.get("step") or {}

        def mean(key):
            return (st.get(key) or {}).get("mean")
        per = an.get("ops_per_step") or 0
        res["profile"] = {
            "grouping": an.get("grouping"), "steps_found": an.get("steps_found"), "ops_per_step": per,
            "kernel_mean_us": mean("kernel_sum_us") / per if per and mean("kernel_sum_us") is not None else None,
            "gap_mean_us": mean("gap_mean_us"), "start_to_start_us": mean("start_to_start_us"),
            "span_us": mean("span_us"), "error": an.get("error"),
        }
    except Exception as e:  # noqa: BLE001 - the timed figures stand without the profile
        res["profile"] = {"error": f"{type(e).__name__}: {e}"}
    ok = bool(torch.isfinite(x).all().item())
    res["verified"] = ok
    del g, x
    return res


def bandwidth(torch, gib: float, reps: int) -> dict:
    """GB/s of a read (sum) and a copy of gib GiB, timed with events (best and median)."""
    n = int(gib * (1 << 30)) // 4
    x = torch.ones(n, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    out = {"gib": gib, "reps": reps}
    for name, fn, nbytes in (("read", lambda: x.sum(), 4 * n), ("copy", lambda: y.copy_(x), 8 * n)):
        t = time_replays(torch, fn, reps, warmup=2)
        gbps = sorted(nbytes / (ms / 1e3) / 1e9 for ms in t["event_ms"] if ms > 0)
        out[f"{name}_gbps_best"] = gbps[-1] if gbps else None
        out[f"{name}_gbps_p50"] = lib.percentile(gbps, 50)
    del x, y
    torch.cuda.empty_cache()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="run", help="label for this run (the environment decides the rest)")
    ap.add_argument("--json", required=True)
    ap.add_argument("--params-b", type=float, default=8.0)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--batch", type=int, default=8, help="decode bucket")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--out-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=400, help="timed replays")
    ap.add_argument("--warmup", type=int, default=30, help="untimed replays first")
    ap.add_argument("--profile-steps", type=int, default=50, help="profiled replays (0: none)")
    ap.add_argument("--micro-kernels", type=int, default=200, help="kernels in each microbench graph (0: none)")
    ap.add_argument("--micro-reps", type=int, default=50)
    ap.add_argument("--bw-gib", type=float, default=1.0, help="bandwidth test size (0: none)")
    ap.add_argument("--clock-ms", type=int, default=100, help="nvidia-smi sampling period during the timed part")
    ap.add_argument("--keep-trace", default="", help="keep the decode profile's Chrome trace here")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    t_proc = time.perf_counter()
    out = {"variant": a.variant, "ok": False, "argv": sys.argv[1:], "pid": os.getpid(),
           "env": lib.env_info(dict(os.environ)), "errors": []}
    workdir = tempfile.mkdtemp(prefix="mps-cost-")
    try:
        import torch
        import llama
        out["env"].update(torch=torch.__version__, cuda=torch.version.cuda, smi=smi())
        cfg = llama.config_for_params(a.params_b, a.layers)
        eng = llama.Engine(cfg, max_slots=a.batch + 1, prompt_len=a.prompt, max_new=a.out_tokens,
                           device="cuda", dtype=torch.bfloat16, seed=a.seed, max_prefill=1)
        t_build = time.perf_counter()
        eng.prepare([a.batch], [1], use_graphs=True)
        t_cap = time.perf_counter()
        props = torch.cuda.get_device_properties(0)
        out["env"].update(gpu=torch.cuda.get_device_name(0), sms=props.multi_processor_count,
                          # Now that the context exists: an MPS client's server is running.
                          mps_processes_after_init=lib.mps_processes())
        after = lib.env_info(dict(os.environ))
        out["env"].update(mps_server_for_pipe_after_init=after["mps_server_for_pipe"],
                          mps_server_running_after_init=after["mps_server_running"])
        out["config"] = {"params": cfg["params"], "layers": cfg["layers"], "hidden": cfg["hidden"],
                         "batch": a.batch, "prompt": a.prompt, "out_tokens": a.out_tokens, "steps": a.steps,
                         "warmup": a.warmup, "profile_steps": a.profile_steps, "micro_kernels": a.micro_kernels}
        out["startup_s"] = {"build": t_build - t_proc, "capture": t_cap - t_build}
        print(f"[mps_cost {a.variant}] {cfg['params'] / 1e9:.2f}B, {cfg['layers']} layers, batch {a.batch}: "
              f"ready in {t_cap - t_proc:.1f}s", flush=True)
        graph = eng.decode_graphs[a.batch]

        # (a) timed replays, the clock sampled around and during them
        gc.collect()
        gc.disable()
        clocks = {"before": smi(("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw")),
                  "torch_clock_rate_before": torch_clock(torch)}
        sampler = gpu_state.Sampler(os.path.join(workdir, "clocks.csv"), a.clock_ms)
        sampler.start()
        t = time_replays(torch, graph.replay, a.steps, a.warmup)
        clocks["during"] = sampler.stop()
        clocks["after"] = smi(("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw"))
        clocks["torch_clock_rate_after"] = torch_clock(torch)
        gc.enable()
        out["timed"] = {"steps": a.steps, "event_ms": lib.summary(t["event_ms"]), "host_ms": lib.summary(t["host_ms"]),
                        "launch_us": lib.summary(t["launch_us"])}
        out["clocks"] = clocks
        out["verified"] = bool(torch.isfinite(eng.kcache[:, : a.batch]).all().item())
        out["ok"] = True
        ev = out["timed"]["event_ms"]
        print(f"[mps_cost {a.variant}] step p50 {ev['p50']:.3f} ms mean {ev['mean']:.3f} ms", flush=True)

        # (b) profiled replays
        if a.profile_steps > 0:
            try:
                trace = profile_trace(torch, replays(torch, graph.replay, a.profile_steps), workdir, "decode",
                                      a.keep_trace)
                prof = lib.analyze_profile(trace, a.profile_steps)
                if not prof.get("ops_total"):
                    # CUPTI saw no kernels of a graph captured before profiling began (seen with some
                    # CUDA versions): capture the step again inside a profiling session and replay it there.
                    def body():
                        g2 = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g2):
                            eng._decode(a.batch)
                        torch.cuda.synchronize()
                        replays(torch, g2.replay, a.profile_steps)()
                    prof = lib.analyze_profile(profile_trace(torch, body, workdir, "decode2"), a.profile_steps)
                    prof["captured_inside_profile"] = True
                out["profile"] = prof
                if prof.get("error"):
                    out["errors"].append(f"profile: {prof['error']}")
            except Exception as e:  # noqa: BLE001
                out["profile"] = {"error": f"{type(e).__name__}: {e}"}
                out["errors"].append(f"profile: {traceback.format_exc()[-1500:]}")
        del graph, eng
        gc.collect()
        torch.cuda.empty_cache()

        # (c) microbenchmarks: launch-to-launch inside a graph, and bandwidth
        if a.micro_kernels > 0:
            out["micro"] = {}
            for name, n in (("tiny", 1024), ("wide", 1 << 22)):
                try:
                    out["micro"][name] = micro(torch, n, a.micro_kernels, a.micro_reps, 5, workdir)
                except Exception as e:  # noqa: BLE001
                    out["micro"][name] = {"error": f"{type(e).__name__}: {e}"}
                    out["errors"].append(f"micro {name}: {traceback.format_exc()[-1500:]}")
        if a.bw_gib > 0:
            try:
                out["bandwidth"] = bandwidth(torch, a.bw_gib, 10)
            except Exception as e:  # noqa: BLE001
                out["bandwidth"] = {"error": f"{type(e).__name__}: {e}"}
                out["errors"].append(f"bandwidth: {traceback.format_exc()[-1500:]}")
    except BaseException as e:  # noqa: BLE001 - always write a result
        out["error"] = f"{type(e).__name__}: {e}"
        out["traceback"] = traceback.format_exc()[-4000:]
        print(out["traceback"], file=sys.stderr, flush=True)
    out["seconds"] = time.perf_counter() - t_proc
    tmp = a.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, a.json)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
