# SPDX-License-Identifier: Apache-2.0
"""GPU suite test (b): PyTorch eager, launches counted by gpuosd vs the profiler.

A bf16 4096x4096 matmul plus elementwise ops, ITERS times in a window. Before the window: warm-up
(cuBLAS handles and heuristics, caching allocator). Inside a torch.profiler session (CUDA activity):
read gpuosd's counters for this pid, run the window, synchronize, read them again. Pass if
  - daemon launches delta == kernels the profiler saw executing in the window (and > 0),
  - daemon graph_launches delta == 0,
  - outputs match a float32 reference: ||out - ref|| / ||ref|| < 1e-2.
Also recorded (not pass criteria): the launch API calls the profiler saw (cudaLaunchKernel & co.).

usage: torch_eager.py [RESULT.json]   (prints one line of JSON; exit 0 only on pass)
"""

import collections
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpuos_counters as gc  # noqa: E402

N = 4096
ITERS = 20
WARMUP = 3
TOL = 1e-2


def body(result):
    import torch
    from torch.profiler import ProfilerActivity, profile

    result.update(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0))
    # Exact fp32 reference (no TF32) and fp32 accumulation for the bf16 GEMM.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(1234)
    # Scaled so that c = a @ b has entries of order 1.
    a = (torch.randn(N, N, device=dev, generator=gen) / 64.0).to(torch.bfloat16)
    b = torch.randn(N, N, device=dev, generator=gen).to(torch.bfloat16)
    bias = torch.randn(N, device=dev, generator=gen).to(torch.bfloat16)

    def step():
        c = a @ b                                       # cuBLAS(Lt) GEMM
        y = torch.nn.functional.gelu(c) * 0.5 + bias    # three elementwise kernels
        return c, y

    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()

    trace = os.path.join(tempfile.mkdtemp(prefix="gpuos-torch-eager-"), "trace.json")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        before = gc.counters()
        for _ in range(ITERS):
            c, y = step()
        torch.cuda.synchronize()
        after = gc.counters()
    prof.export_chrome_trace(trace)

    with open(trace) as f:
        events = json.load(f).get("traceEvents", [])
    # Device-side kernel records ("kernel"; older Kineto wrote "Kernel").
    kernels = [e for e in events if str(e.get("cat", "")).lower() == "kernel"]
    kernel_names = collections.Counter(e.get("name", "?")[:80] for e in kernels)
    launch_api = collections.Counter(
        e.get("name") for e in events
        if str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "runtime", "driver")
        and "LaunchKernel" in str(e.get("name"))
    )

    # Correctness, outside the window.
    ref_c = a.float() @ b.float()
    ref_y = torch.nn.functional.gelu(ref_c) * 0.5 + bias.float()
    err_c = gc.rel_err(c, ref_c)
    err_y = gc.rel_err(y, ref_y)

    d = gc.delta(before, after)
    result["issued"] = {"kernels_profiler": len(kernels), "launch_api_calls_profiler": sum(launch_api.values()),
                        "iterations": ITERS}
    result["counted"] = d
    result["details"] = {
        "rel_err_matmul": err_c,
        "rel_err_elementwise": err_y,
        "kernels_by_name": dict(kernel_names.most_common(12)),
        "launch_api_by_name": dict(launch_api),
        "kernels_per_iteration": len(kernels) / ITERS,
        "counters_before": before,
        "counters_after": after,
    }
    return {
        "daemon_launches_equal_profiler_kernels": d["launches"] == len(kernels),
        "kernels_seen": len(kernels) > 0,
        "no_graph_launches": d["graph_launches"] == 0,
        "matmul_close_to_fp32": err_c < TOL,
        "elementwise_close_to_fp32": err_y < TOL,
    }


if __name__ == "__main__":
    gc.run_guarded("torch_eager", body)
