#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs gpu/tests/mps_cost.py on fake_torch (no GPU): `run_stub.py ARGS...` = `mps_cost.py ARGS...`.

FAKE_FAIL_VARIANT=NAME: that variant exits 3 at once, writing nothing. FAKE_KILL_VARIANT=NAME: that
variant first sends SIGTERM to the gpu/mps_cost.sh that runs it (then runs as usual)."""
import os
import runpy
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "..", "gpu", "tests", "mps_cost.py")


def variant() -> str:
    a = sys.argv[1:]
    return a[a.index("--variant") + 1] if "--variant" in a else ""


def signal_runner_script() -> None:
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return
        if any(c.endswith(b"mps_cost.sh") for c in cmd):
            os.kill(pid, signal.SIGTERM)
            return
        pid = ppid


if __name__ == "__main__":
    if variant() and variant() == os.environ.get("FAKE_FAIL_VARIANT"):
        sys.exit(3)
    if variant() and variant() == os.environ.get("FAKE_KILL_VARIANT"):
        signal_runner_script()
    sys.path.insert(0, HERE)
    import fake_torch
    sys.modules["torch"] = fake_torch.torch
    sys.modules["torch.profiler"] = fake_torch.profiler
    sys.modules["llama"] = fake_torch.llama
    sys.argv = [SCRIPT] + sys.argv[1:]
    runpy.run_path(SCRIPT, run_name="__main__")
