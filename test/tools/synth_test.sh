#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpuos-synth on the driver test double: exit codes and the JSON result.
#   synth_test.sh <gpuos-synth> <dir holding the double's libcuda.so.1> <python3>
set -euo pipefail

synth=$1
double_dir=$2
python=${3:-python3}

if [[ ! -x $synth ]]; then echo "FAIL: $synth is not built" >&2; exit 1; fi
if [[ ! -e $double_dir/libcuda.so.1 ]]; then
  echo "FAIL: the driver double $double_dir/libcuda.so.1 is not built (target gpuos_driver_double)" >&2
  exit 1
fi

# Our own simulated GPU: a unique shared segment, removed on exit; a small SM count proves that the
# double (not some real driver) answered.
export LD_LIBRARY_PATH=$double_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GPUOS_SIM_SHM=/gpuos-sim-test-$$
export GPUOS_SIM_SMS=16
export GPUOS_SIM_NS_PER_ITER=1.0
unset LD_PRELOAD
work=$(mktemp -d)
cleanup() { rm -rf "$work"; rm -f "/dev/shm${GPUOS_SIM_SHM}"; }
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# check_json FILE KEY=VALUE...: the fields every result has, plus exact values asked for.
check_json() {
  "$python" - "$@" <<'PY'
import json, sys
path, *expect = sys.argv[1:]
with open(path) as f:
    r = json.load(f)
fields = {"name": str, "kernels": int, "p50_us": (int, float), "p90_us": (int, float),
          "p99_us": (int, float), "max_us": (int, float), "mean_us": (int, float),
          "throughput_per_s": (int, float), "wall_s": (int, float), "mem_bytes": int,
          "verified": bool, "device": str, "sms": int, "iters": int, "grid": int, "block": int,
          "mode": str, "launches_issued": int}
bad = [k for k, t in fields.items() if k not in r or not isinstance(r[k], t)]
if bad:
    sys.exit(f"{path}: missing or mistyped fields {bad}: {r}")
if not (0 < r["p50_us"] <= r["p90_us"] <= r["p99_us"] <= r["max_us"]):
    sys.exit(f"{path}: percentiles out of order: {r}")
if not (r["wall_s"] > 0 and r["throughput_per_s"] > 0 and r["mean_us"] > 0):
    sys.exit(f"{path}: non-positive timing: {r}")
for kv in expect:
    k, v = kv.split("=", 1)
    got = r.get(k)
    try:
        want = json.loads(v)  # numbers, true/false
    except ValueError:
        want = v              # bare strings
    if got != want:
        sys.exit(f"{path}: {k} = {got!r}, expected {want!r}: {r}")
print(f"ok {path}: {r['name']} p50={r['p50_us']}us p99={r['p99_us']}us verified={r['verified']}")
PY
}

# 1. Closed loop with memory: exit 0, verified, counts exact.
"$synth" --name t-closed --iters 20000 --blocks-per-sm 2 --block 256 --count 20 --gap-us 100 \
  --mode closed --mem-mib 4 --warmup 3 --json "$work/closed.json" || fail "closed loop exited $?"
check_json "$work/closed.json" name=t-closed kernels=20 verified=true sms=16 grid=32 block=256 \
  iters=20000 mode=closed mem_bytes=4194304 launches_issued=24   # 20 + 3 warm-up + 1 fill

# 2. Open loop (Poisson arrivals), JSON on stdout.
"$synth" --name t-open --iters 10000 --count 50 --mode open --rate 2000 --warmup 1 --json - \
  >"$work/open.json" || fail "open loop exited $?"
check_json "$work/open.json" name=t-open kernels=50 verified=true sms=16 grid=16 mode=open \
  launches_issued=51

# 2b. A fixed grid whatever the SM count (--blocks).
"$synth" --name t-grid --iters 1000 --blocks 5 --count 4 --warmup 1 --json "$work/grid.json" \
  || fail "--blocks exited $?"
check_json "$work/grid.json" name=t-grid kernels=4 verified=true sms=16 grid=5

# 3. A CUDA error (no such device) exits 4 and names the error.
set +e
"$synth" --name t-baddev --device 7 --count 1 --json "$work/bad.json" 2>"$work/bad.err"
rc=$?
set -e
[[ $rc -eq 4 ]] || fail "bad device: exit $rc, expected 4"
grep -q "CUDA_ERROR_" "$work/bad.err" || fail "bad device: no CUDA error name in: $(cat "$work/bad.err")"
[[ ! -e $work/bad.json ]] || fail "bad device: JSON written despite the error"

# 4. A bad command line exits 2, as in every gpuos program.
set +e
"$synth" --mode sideways >/dev/null 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "bad --mode: exit $rc, expected 2"
set +e
"$synth" --blocks 0 >/dev/null 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "--blocks 0: exit $rc, expected 2"

# 5. --device-trace needs the instrumented kernel, which only the real GPU's module has: a clear
# error, no JSON, no half-written trace.
set +e
"$synth" --name t-dtrace --count 1 --device-trace "$work/dev.csv" --json "$work/dev.json" 2>"$work/dev.err"
rc=$?
set -e
[[ $rc -eq 3 ]] || fail "--device-trace on the double: exit $rc, expected 3"
grep -q "real GPU only" "$work/dev.err" || fail "--device-trace: unclear error: $(cat "$work/dev.err")"
[[ ! -e $work/dev.json && ! -e $work/dev.csv ]] || fail "--device-trace: output written despite the error"

echo "PASS: gpuos-synth on the driver double"
