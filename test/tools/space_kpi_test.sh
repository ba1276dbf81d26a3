#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu/space_kpi.sh end to end on the driver test double: one exclusive/space pair through
# run_matrix.py, judged by space_kpi.py into kpi.md, kpi.json and runs.tgz.
#   space_kpi_test.sh <build bin dir> <dir holding the double's libcuda.so.1>
set -euo pipefail
bin=$1
double_dir=$2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -x $bin/gpuos && -x $bin/gpuos-synth && -x $bin/gpuosd ]] || fail "gpuos, gpuosd and gpuos-synth must be built in $bin"
[[ -e $double_dir/libcuda.so.1 ]] || fail "the driver double $double_dir/libcuda.so.1 is not built"

export LD_LIBRARY_PATH=$double_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$repo/test/tools/fake_bin:$PATH  # nvidia-smi: the harness samples the GPU's clock
export GPUOS_SIM_SHM=/gpuos-sim-kpi-$$
unset LD_PRELOAD
out=$(mktemp -d)
cleanup() { rm -rf "$out"; rm -f "/dev/shm${GPUOS_SIM_SHM}"; }
trap cleanup EXIT

OUT=$out LOADS=0.5 FULL=0 REPEATS=1 WINDOW=2 \
  MORE="--space-mps-control $repo/test/e2e/fake_mps_control.sh --be-window 2 --calibrate-s 1 --synth-bin $bin/gpuos-synth --gpuos-bin $bin/gpuos" \
  bash "$repo/gpu/space_kpi.sh" || fail "space_kpi.sh exited $?"

# The judged row: p99 ratio, BE ratio and the size gpuosd's sizer held at the end, of the 112-SM
# default, each with its verdict. What they read is not checked: the double's timings carry the
# host's scheduling noise (the sizer's own unit tests check where it settles). On a loaded machine
# BE may have had no measured window ("-"), HP may have been busy throughout (BE target 0 or 1)
# and the sizer may not have timed a size yet ("-"); the verdict marks are there regardless.
num='([0-9]+\.[0-9]+|-)'
grep -E "^\\| 0\\.5 \\| pair-0\\.5-1 \\| gpuos-space-priority \\| [0-9.]+ (ok|MISS) \\| $num (ok|MISS) \\| $num \\| [0-9]+/112 \\| [0-9]+% (ok|MISS) \\| $num \\| 1980 \\(1980\\) \\|" \
  "$out/kpi.md" >/dev/null || fail "kpi.md lacks the judged space row: $(cat "$out/kpi.md")"
grep -E '^\| 0\.5 \| pair-0\.5-1 \| exclusive-hp-again \| [0-9.]+ \|' "$out/kpi.md" >/dev/null \
  || fail "kpi.md lacks the drift row: $(cat "$out/kpi.md")"
python3 -c "
import json, sys
rows = {r['mode']: r for r in json.load(open(sys.argv[1]))}
assert sorted(rows) == ['exclusive-hp-again', 'gpuos-space-priority'], rows
r = rows['gpuos-space-priority']
assert r['default_sms'] == 112 and r['sized_sms'] % 8 == 0, r
assert abs(r['saved'] - (112 - r['sized_sms']) / 112) < 1e-9, r
" "$out/kpi.json" || fail "kpi.json"
# The listing first, then grep: `tar | grep -q` under pipefail fails when grep's early exit cuts
# tar off with SIGPIPE (it did, now and then, on a busy machine).
tar tzf "$out/runs.tgz" >"$out/runs.list" || fail "runs.tgz is unreadable"
grep -q 'runs/pair-0.5-1/matrix/raw.json' "$out/runs.list" || fail "runs.tgz lacks raw.json"
grep -q 'runs/pair-0.5-1/matrix/gpuos-space-priority.daemon.log' "$out/runs.list" || fail "runs.tgz lacks the daemon log"

# Bad input: a folder without raw.json is a clear error (exit 2), not a traceback.
set +e
msg=$(python3 "$repo/bench/colocation/space_kpi.py" "$out/nothing" --out "$out/k2" 2>&1)
rc=$?
set -e
[[ $rc == 2 && $msg == *"raw.json"* && $msg != *Traceback* ]] || fail "missing raw.json: rc $rc: $msg"
echo "space_kpi on the driver double: ok"
