# SPDX-License-Identifier: Apache-2.0
"""Read gpuosd's counters for this process, and small helpers shared by the GPU suite's tests.

The daemon's view comes from `$GPUOS_CLI ps --json` (schema in docs/CONTRACTS.md), run without our
LD_PRELOAD (the CLI is not a tenant). Also a command line for gpu/run_suite.sh:

    python3 gpuos_counters.py wait-exited NAME RESULT_JSON
        polls `ps --all --json` (up to 10 s) for the tenant NAME (and the pid recorded in RESULT_JSON,
        when there is one) to show state "exited"; prints a one-line JSON verdict; exit 0 if seen.
"""

import json
import os
import subprocess
import sys
import time

COUNTER_KEYS = ("launches", "graph_launches", "captured_launches")


def _cli():
    cli = os.environ.get("GPUOS_CLI")
    if not cli:
        raise RuntimeError("GPUOS_CLI is not set (path of the gpuos CLI)")
    return cli


def ps(all_tenants=False):
    """The parsed output of `gpuos ps --json` (with --all when asked)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    cmd = [_cli(), "ps", "--json"] + (["--all"] if all_tenants else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def tenant(pid=None):
    """The daemon's record of a live tenant (default: this process). Raises if there is none."""
    pid = os.getpid() if pid is None else pid
    records = [t for t in ps().get("tenants", []) if t.get("pid") == pid]
    live = [t for t in records if t.get("state") != "exited"]
    if not (live or records):
        raise RuntimeError(f"gpuosd has no tenant with pid {pid} (not registered?)")
    return (live or records)[-1]


def counters(pid=None):
    """{launches, graph_launches, captured_launches} of this process as gpuosd counts them."""
    t = tenant(pid)
    return {k: int(t[k]) for k in COUNTER_KEYS}


def delta(before, after):
    return {k: after[k] - before[k] for k in COUNTER_KEYS}


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64 (torch tensors)."""
    o = out.double()
    r = ref.double()
    return float((o - r).norm() / r.norm())


def finish(result, checks):
    """Records `checks` ({name: bool}) in result, prints one line of JSON (and writes it to the path
    given as argv[1], if any), and exits 0 only if every check passed."""
    result["checks"] = checks
    result["failures"] = [k for k, ok in checks.items() if not ok]
    result["passed"] = bool(checks) and not result["failures"]
    emit(result)
    sys.exit(0 if result["passed"] else 1)


def emit(result):
    line = json.dumps(result, sort_keys=False, default=str)
    print(line, flush=True)
    if len(sys.argv) > 1 and sys.argv[1]:
        with open(sys.argv[1], "w") as f:
            f.write(line + "\n")


def run_guarded(name, body):
    """Runs body(result) -> checks; any exception becomes a failed result with the error."""
    result = {"name": name, "pid": os.getpid(), "passed": False}
    try:
        checks = body(result)
    except Exception as e:  # report, never hide: the suite records the error text
        import traceback

        traceback.print_exc()
        result["error"] = f"{type(e).__name__}: {e}"
        checks = {"ran_to_completion": False}
    finish(result, checks)


def _wait_exited(name, result_path, timeout_s=10.0):
    pid = None
    try:
        with open(result_path) as f:
            pid = json.loads(f.read().strip().splitlines()[-1]).get("pid")
    except (OSError, ValueError, IndexError, AttributeError):
        pass  # no result (the test crashed): match by name alone
    deadline = time.monotonic() + timeout_s
    verdict = {"name": name, "pid": pid, "registered": False, "exited": False, "record": None}
    while True:
        try:
            records = [t for t in ps(all_tenants=True).get("tenants", [])
                       if t.get("name") == name and (pid is None or t.get("pid") == pid)]
            verdict.pop("error", None)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            records = []
            verdict["error"] = str(e)
        if records:
            rec = records[-1]
            verdict.update(registered=True, exited=rec.get("state") == "exited", record=rec)
            if verdict["exited"]:
                break
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    print(json.dumps(verdict))
    return 0 if verdict["exited"] else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "wait-exited":
        sys.exit(_wait_exited(sys.argv[2], sys.argv[3]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)  # usage error (gpuos exit-code scheme: docs/OPERATIONS.md)
