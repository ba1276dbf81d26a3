# SPDX-License-Identifier: Apache-2.0
"""GPU suite test (c): PyTorch CUDA graphs, capture and replay as gpuosd counts them.

A small model step (two Linear layers, GELU, a residual and a scale) is warmed up on a side stream
(as the PyTorch CUDA-graphs docs require), run eagerly once for the reference, captured into a
torch.cuda.CUDAGraph, then replayed K times in a window. Pass if
  - during capture: daemon captured_launches grew, and the launches it counted as submitted equal
    the kernels the profiler saw actually execute in that window (torch.cuda.graph runs a few real
    kernels around the capture, e.g. generator-state setup; captured ones never execute),
  - during the K replays: daemon graph_launches delta == K and launches delta == 0,
  - the replayed output equals the eager output (fp32, TF32 off: bitwise expected, 1e-5 accepted).
Recorded too (not a pass criterion): kernels the profiler sees in one replay vs captured_launches.

usage: torch_graphs.py [RESULT.json]   (prints one line of JSON; exit 0 only on pass)
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpuos_counters as gc  # noqa: E402

K = 50
BATCH = 256
WIDTH = 1024


def body(result):
    import torch
    from torch.profiler import ProfilerActivity, profile

    result.update(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    dev = torch.device("cuda")

    model = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU(), torch.nn.Linear(WIDTH, WIDTH)
    ).to(dev).eval()
    static_x = torch.randn(BATCH, WIDTH, device=dev)

    # No RNG ops (dropout) in the captured step: with a generator in the graph, PyTorch's replay()
    # first runs fill_ kernels (replay_prologue) outside the graph, real launches on every replay.
    def step(x):
        h = model(x)
        return torch.tanh(h) * 0.5 + x

    with torch.no_grad():
        # Warm-up on a side stream (cuBLAS workspaces, allocator) before capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step(static_x)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()

        eager = step(static_x).clone()
        torch.cuda.synchronize()

        c0 = gc.counters()
        graph = torch.cuda.CUDAGraph()
        trace_dir = tempfile.mkdtemp(prefix="gpuos-torch-graphs-")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            with torch.cuda.graph(graph):
                static_y = step(static_x)
            torch.cuda.synchronize()
        c1 = gc.counters()
        prof.export_chrome_trace(os.path.join(trace_dir, "capture.json"))
        with open(os.path.join(trace_dir, "capture.json")) as f:
            capture_executed = sum(1 for e in json.load(f).get("traceEvents", [])
                                   if str(e.get("cat", "")).lower() == "kernel")

        for _ in range(K):
            graph.replay()
        torch.cuda.synchronize()
        c2 = gc.counters()

        replayed = static_y.clone()
        torch.cuda.synchronize()

        # Informational: kernels executed by one replay, seen by the profiler.
        trace = os.path.join(trace_dir, "trace.json")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            graph.replay()
            torch.cuda.synchronize()
        prof.export_chrome_trace(trace)
        with open(trace) as f:
            replay_kernels = sum(1 for e in json.load(f).get("traceEvents", []) if str(e.get("cat", "")).lower() == "kernel")

    capture = gc.delta(c0, c1)
    replay = gc.delta(c1, c2)
    bitwise = bool(torch.equal(replayed, eager))
    max_abs = float((replayed - eager).abs().max())
    close = bool(torch.allclose(replayed, eager, rtol=1e-5, atol=1e-5))

    result["issued"] = {"replays": K, "graph_launches": K, "launches": 0}
    result["counted"] = {"replay_window": replay, "capture_window": capture}
    result["details"] = {
        "bitwise_equal": bitwise,
        "max_abs_diff": max_abs,
        "profiler_kernels_per_replay": replay_kernels,
        "profiler_kernels_executed_in_capture_window": capture_executed,
        "captured_launches_match_profiler": replay_kernels == capture["captured_launches"],
        "counters": {"before_capture": c0, "after_capture": c1, "after_replays": c2},
    }
    return {
        "captured_launches_grew_in_capture": capture["captured_launches"] > 0,
        "submitted_in_capture_window_equal_executed": capture["launches"] == capture_executed,
        "graph_launches_equal_K": replay["graph_launches"] == K,
        "no_launches_in_replays": replay["launches"] == 0,
        "replay_equals_eager": close,
    }


if __name__ == "__main__":
    gc.run_guarded("torch_graphs", body)
