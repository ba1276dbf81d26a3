#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu/lib on the driver test double (no GPU): gpu/lib/gpuosd.sh starts a private gpuosd, knows when it
# answers (gpuos ps, or its metrics line), stops it cleanly and writes daemon_status.json; a gpuosd
# that cannot start is reported at once, not waited for; gpu/lib/detach.sh runs a command detached,
# waits for it, says "still running" (3) while it runs, and gives its exit status; and
# gpu/learned_phase.sh, which uses gpuosd.sh, holds on the double.
#   gpu_lib_test.sh <build dir> <dir holding the double's libcuda.so.1>
set -uo pipefail
build=$1
double_dir=$2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -x $build/bin/gpuos && -x $build/bin/gpuosd ]] || fail "gpuos and gpuosd must be built in $build/bin"
[[ -e $double_dir/libcuda.so.1 ]] || fail "the driver double $double_dir/libcuda.so.1 is not built"

export LD_LIBRARY_PATH=$double_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GPUOS_DRIVER_LIBRARY=$double_dir/libcuda.so.1
export GPUOS_SIM_SHM=/gpuos-sim-gpulib-$$
export GPUOS_SYSTEM_CONFIG=/nonexistent/gpuos-gpulib/gpuos.toml GPUOS_SYSTEM_SOCKET=/nonexistent/gpuos-gpulib/gpuosd.sock
unset LD_PRELOAD GPUOS_CONFIG GPUOS_SOCKET
w=$(mktemp -d /tmp/gpuos-gpulib.XXXXXX)
cleanup() {
  [[ -n ${GPUOSD_PID:-} ]] && kill -KILL "$GPUOSD_PID" 2>/dev/null
  rm -rf "$w"
  rm -f "/dev/shm${GPUOS_SIM_SHM}"*
}
trap cleanup EXIT
cd "$repo" || exit 1
source gpu/lib/gpuosd.sh
source gpu/lib/detach.sh
gpuos=$build/bin/gpuos sock=$w/gpuosd.sock

# 1. up (gpuos ps answers), then stopped by SIGTERM with a clean exit.
touch "$sock"  # a stale socket of an earlier run goes first
gpuosd_start_metrics "$gpuos" "$sock" "$w/d1.log" 60 "$build/bin/gpuosd" --socket "$sock" ||
  fail "no metrics line: $(tail -5 "$w/d1.log")"
pid=$GPUOSD_PID
[[ $GPUOSD_PORT =~ ^[0-9]+$ && $GPUOSD_PORT -gt 0 ]] || fail "metrics port '$GPUOSD_PORT'"
[[ $(gpuosd_metric gpuos_daemon_tenants) == 0 ]] || fail "gpuosd_metric: $(gpuosd_metric gpuos_daemon_tenants)"
gpuosd_wait 60 || fail "gpuosd did not answer: $(tail -5 "$w/d1.log")"
[[ $GPUOSD_STARTED == 1 ]] || fail "GPUOSD_STARTED not set"
"$gpuos" ps --socket "$sock" >/dev/null || fail "gpuos ps does not answer after gpuosd_wait"
gpuosd_stop 30 "$w/status.json" || fail "gpuosd exited $? on SIGTERM"
kill -0 "$pid" 2>/dev/null && fail "gpuosd $pid still runs after gpuosd_stop"
[[ -z $GPUOSD_PID ]] || fail "GPUOSD_PID not cleared"
python3 - "$w/status.json" <<'EOF' || fail "daemon_status.json: $(cat "$w/status.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s == {"started": True, "alive_at_end": True, "stopped_by": "SIGTERM", "stopped_cleanly": True,
             "exit_status": 0}, s
EOF
gpuosd_stop || fail "a second gpuosd_stop must do nothing"

# 2. a gpuosd that cannot start: gpuosd_wait gives up as soon as it exited, not after the 60 s.
gpuosd_start "$gpuos" "$sock" "$w/d2.log" "$build/bin/gpuosd" --socket "$sock" --no-such-flag
t0=$SECONDS
gpuosd_wait 60 && fail "gpuosd_wait said up for a gpuosd that exited"
((SECONDS - t0 < 30)) || fail "gpuosd_wait waited $((SECONDS - t0)) s for a gpuosd that had exited"
gpuosd_stop 5 "$w/status2.json"
grep -q '"started":false' "$w/status2.json" || fail "status of a failed start: $(cat "$w/status2.json")"

# 3. detach: still running (3), then done with the command's own exit status.
run=$w/run
detach_start "$run" "$w/run.log" bash -c 'echo working; until [[ -e $0 ]]; do sleep 0.1; done; exit 7' "$w/go"
detach_started "$run" || fail "detach_started: no $run/started"
out=$(detach_wait "$run" 1 "$w/run.log" "call again")
[[ $? == 3 && $out == *"still running after 1 s: call again"* ]] || fail "detach_wait while running: '$out'"
touch "$w/go"
detach_wait "$run" 60 "$w/run.log" "call again" >/dev/null || fail "the detached run did not end"
detach_status "$run"
[[ $? == 7 ]] || fail "detach_status: $(cat "$run/done")"
grep -q working "$w/run.log" || fail "the detached run's output is not in its log"
# 4. gpu/learned_phase.sh (a GPU check of #40's long launches learned from timings) on the double:
# the synth's every 10th launch marked long, none of the steady synth's. The double's kernels take
# wall-clock time, so they are 5 ms long here (25 ns per iteration): a loaded 2-core machine
# stalls the double's stream thread for a few ms, which doubled some 0.5 ms kernels of the steady
# synth and marked them long (1-3 of 400 beside three busy loops).
OUT=$w/phase GPUOS_BUILD_DIR=$build GPUOS_SIM_NS_PER_ITER=25 bash gpu/learned_phase.sh >"$w/phase.out" 2>&1 ||
  fail "gpu/learned_phase.sh: $(cat "$w/phase.out")"
python3 - "$w/phase/learned_phase.json" <<'EOF' || fail "learned_phase.json: $(cat "$w/phase/learned_phase.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ok"] and 10 <= r["server"]["long_launches"] <= 40 and r["steady"]["long_launches"] == 0, r
EOF
echo "gpu/lib on the driver double: ok"
