# SPDX-License-Identifier: Apache-2.0
"""Collects the GPU suite's results into $OUT/gpu_suite.json and $OUT/gpu_suite.md; prints the table.

Called by gpu/run_suite.sh:
    suite_report.py --work DIR --out DIR --gpu NAME --driver VERSION
DIR (the work directory) holds runs.tsv (name, exit status, seconds per test), results/<name>.json
(each test's one-line result), reg/<name>.json (did gpuosd see the tenant register and exit) and
daemon_status.json. Exit status 0 only if every test passed.
"""

import argparse
import datetime
import json
import os
import sys


def load_json(path):
    try:
        with open(path) as f:
            text = f.read().strip()
        return json.loads(text.splitlines()[-1]) if text else None
    except (OSError, ValueError, IndexError):
        return None


def brief(d):
    """A dict as `k=v, ...` for the table."""
    if not isinstance(d, dict):
        return "-" if d is None else str(d)
    parts = []
    for k, v in d.items():
        parts.append(f"{k}: {{{brief(v)}}}" if isinstance(v, dict) else f"{k}={v}")
    return ", ".join(parts)


def collect(work):
    tests = []
    runs = []
    try:
        with open(os.path.join(work, "runs.tsv")) as f:
            runs = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    except OSError:
        pass
    for name, rc, secs in runs:
        rc = int(rc)
        result = load_json(os.path.join(work, "results", f"{name}.json"))
        reg = load_json(os.path.join(work, "reg", f"{name}.json")) or {}
        registered_exited = bool(reg.get("registered")) and bool(reg.get("exited"))
        result_passed = bool(result and result.get("passed") is True)
        notes = []
        if rc != 0:
            notes.append(f"exit {rc}" + (" (timeout)" if rc in (124, 137) else ""))
        if result is None:
            notes.append("no result line")
        else:
            if result.get("error"):
                notes.append(str(result["error"]))
            notes.extend(str(x) for x in result.get("failures", []))
        if not reg.get("registered"):
            notes.append("daemon never listed the tenant" + (f" ({reg['error']})" if reg.get("error") else ""))
        elif not reg.get("exited"):
            notes.append("daemon did not mark the tenant exited")
        details = {k: v for k, v in (result or {}).items() if k not in ("name", "passed", "issued", "counted")}
        details.update(exit_status=rc, seconds=float(secs),
                       registration={k: reg.get(k) for k in ("registered", "exited", "pid")}
                       | {"state": (reg.get("record") or {}).get("state"),
                          "tenant_name": (reg.get("record") or {}).get("name")})
        tests.append({
            "name": name,
            "passed": rc == 0 and result_passed and registered_exited,
            "issued": (result or {}).get("issued"),
            "counted": (result or {}).get("counted"),
            "details": details,
            "notes": notes,
        })
    status = load_json(os.path.join(work, "daemon_status.json")) or {}
    daemon_ok = bool(status.get("started")) and bool(status.get("alive_at_end")) and bool(status.get("stopped_cleanly"))
    tests.append({
        "name": "daemon",
        "passed": daemon_ok,
        "issued": None,
        "counted": None,
        "details": status,
        "notes": [] if daemon_ok else ["gpuosd " + ", ".join(f"{k}={v}" for k, v in status.items())],
    })
    return tests


def table(tests):
    lines = ["| test | passed | issued | counted by gpuosd | notes |", "|---|---|---|---|---|"]
    for t in tests:
        notes = "; ".join(t["notes"]).replace("|", "/") or "-"
        lines.append(f"| {t['name']} | {'PASS' if t['passed'] else 'FAIL'} | {brief(t['issued'])} | "
                     f"{brief(t['counted'])} | {notes} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpu", default="unknown")
    ap.add_argument("--driver", default="unknown")
    args = ap.parse_args()

    tests = collect(args.work)
    all_passed = bool(tests) and all(t["passed"] for t in tests)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    report = {"date": now, "gpu": args.gpu, "driver": args.driver, "passed": all_passed, "tests": tests}
    with open(os.path.join(args.out, "gpu_suite.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    md = (f"# gpuos GPU suite — {now}\n\nGPU: {args.gpu}, driver {args.driver}. "
          f"Result: **{'PASS' if all_passed else 'FAIL'}** "
          f"({sum(t['passed'] for t in tests)}/{len(tests)} passed)\n\n{table(tests)}\n")
    with open(os.path.join(args.out, "gpu_suite.md"), "w") as f:
        f.write(md)
    print(md)
    return 0 if all_passed else 1


if __name__ == "__main__":
    sys.exit(main())
