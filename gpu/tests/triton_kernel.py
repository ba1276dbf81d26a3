# SPDX-License-Identifier: Apache-2.0
"""GPU suite test (d): Triton kernels, launched through Triton's own launcher.

Triton's generated launcher is a C extension linked against libcuda that, in Triton 3.x, gets
cuLaunchKernelEx by dlopen("libcuda.so.1") + dlsym, so this exercises the interposer's dlsym path.
Two kernels (vector add, row softmax) are JIT-compiled and run once (warm-up), then N launches
(N/2 each) run in a window. Pass if
  - daemon launches delta == N, graph_launches delta == 0,
  - results match torch (add: exact; softmax: rtol 1e-5, atol 1e-6).

usage: triton_kernel.py [RESULT.json]   (prints one line of JSON; exit 0 only on pass)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpuos_counters as gc  # noqa: E402

N_LAUNCHES = 100
ELEMS = 1 << 20
ROWS, COLS = 1024, 781  # softmax: a non-power-of-two row exercises masking


# Triton resolves the names a kernel uses through the module's globals, so the kernels (and their
# imports) live at module level; an import failure is reported as the test's result.
try:
    import torch
    import triton
    import triton.language as tl
    IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - reported in the result line
    IMPORT_ERROR = f"{type(e).__name__}: {e}"

if IMPORT_ERROR is None:

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        den = tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_stride + cols, num / den, mask=mask)


def body(result):
    if IMPORT_ERROR is not None:
        raise RuntimeError(IMPORT_ERROR)

    result.update(torch=torch.__version__, triton=triton.__version__, gpu=torch.cuda.get_device_name(0))
    dev = torch.device("cuda")
    torch.manual_seed(0)
    x = torch.randn(ELEMS, device=dev)
    y = torch.randn(ELEMS, device=dev)
    out = torch.empty_like(x)
    s_in = torch.randn(ROWS, COLS, device=dev)
    s_out = torch.empty_like(s_in)
    block_add = 1024
    block_sm = triton.next_power_of_2(COLS)

    def launch_add():
        add_kernel[(triton.cdiv(ELEMS, block_add),)](x, y, out, ELEMS, BLOCK=block_add)

    def launch_softmax():
        softmax_kernel[(ROWS,)](s_out, s_in, s_in.stride(0), s_out.stride(0), COLS, BLOCK=block_sm)

    # Warm-up: JIT compile, load the modules, build Triton's launcher.
    launch_add()
    launch_softmax()
    torch.cuda.synchronize()

    before = gc.counters()
    for i in range(N_LAUNCHES):
        (launch_add if i % 2 == 0 else launch_softmax)()
    torch.cuda.synchronize()
    after = gc.counters()

    ref_add = x + y
    ref_sm = torch.softmax(s_in, dim=1)
    add_ok = bool(torch.equal(out, ref_add))
    sm_err = float((s_out - ref_sm).abs().max())
    sm_ok = bool(torch.allclose(s_out, ref_sm, rtol=1e-5, atol=1e-6))

    d = gc.delta(before, after)
    result["issued"] = {"launches": N_LAUNCHES, "add": N_LAUNCHES // 2, "softmax": N_LAUNCHES - N_LAUNCHES // 2}
    result["counted"] = d
    result["details"] = {"softmax_max_abs_err": sm_err, "counters_before": before, "counters_after": after}
    return {
        "daemon_launches_equal_N": d["launches"] == N_LAUNCHES,
        "no_graph_launches": d["graph_launches"] == 0,
        "add_exact": add_ok,
        "softmax_close": sm_ok,
    }


if __name__ == "__main__":
    gc.run_guarded("triton_kernel", body)
