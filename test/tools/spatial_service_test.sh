#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu/spatial_service.sh end to end on the driver test double (a stand-in MPS control daemon): every
# condition timed, and BE_BUSY_CMD (another best-effort tenant in place of the compute-bound synth)
# run in the domain as best-effort and stopped at the end of its phase. Its kernels are short and
# the HP phase long enough that some of them start while the HP holds its partition (then they are
# placed), also on a loaded 2-core machine (CI saw 20 long BE kernels, none placed).
#   spatial_service_test.sh <build dir> <dir holding the double's libcuda.so.1>
set -euo pipefail
build=$1
double_dir=$2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ -x $build/bin/gpuos && -x $build/bin/gpuos-synth ]] || fail "gpuos and gpuos-synth must be built in $build/bin"
[[ -e $double_dir/libcuda.so.1 ]] || fail "the driver double $double_dir/libcuda.so.1 is not built"

export LD_LIBRARY_PATH=$double_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$repo/test/tools/fake_bin:$PATH
export GPUOS_SIM_SHM=/gpuos-sim-svc-$$
unset LD_PRELOAD
out=$(mktemp -d)
marker=be-svc-test-$$
cleanup() { pkill -f -- "--name $marker" 2>/dev/null || true; rm -rf "$out"; rm -f "/dev/shm${GPUOS_SIM_SHM}"; }
trap cleanup EXIT

OUT=$out GPUOS_BUILD_DIR=$build SPATIAL_TOML="mps_control = \"$repo/test/e2e/fake_mps_control.sh\"" \
  COUNT=80 SIZES=64 HP_BLOCKS=64 BE_WARM_S=1 \
  BE_BUSY_CMD="$build/bin/gpuos-synth --iters 50000 --blocks-per-sm 8 --block 256 --mode closed --count 10000000 --name $marker --json $out/be-busy.json" \
  timeout 150 bash "$repo/gpu/spatial_service.sh" >"$out/run.log" 2>&1 || fail "spatial_service.sh exited $?: $(tail -20 "$out/run.log")"

python3 - "$out" "$marker" <<'PYEOF' || fail "results: $(cat "$out/service.md" 2>/dev/null)"
import json, os, sys
out, marker = sys.argv[1], sys.argv[2]
res = json.load(open(os.path.join(out, "service.json")))
for n in ("alone", "mps-alone", "part-64-idle-be", "part-64-busy-be"):
    assert res[n]["p50_us"] and res[n]["p50_us"] > 0 and res[n]["verified"], (n, res[n])
ps = json.load(open(os.path.join(out, "logs/service/ps-busy.json")))["tenants"]
be = [t for t in ps if t["name"] == "be-busy"]
# It ran beside the HP (whether its own launches were placed yet depends on how busy the machine
# is: placement of best-effort tenants is proven by the e2e Spatial tests).
assert len(be) == 1 and be[0]["class"] == "best-effort" and be[0]["launches"] > 0, be
hp = [t for t in ps if t["name"] == "hp" and t["space_sms"] == 64]
assert hp and all(t["space_launches"] > 0 for t in hp), hp
# Stopped by the script (SIGINT through its gpuos run): the synth wrote its JSON on the way out.
assert json.load(open(os.path.join(out, "be-busy.json")))["name"] == marker
PYEOF
pgrep -f -- "--name $marker" >/dev/null && fail "the busy BE still runs after the script ended"
echo "spatial_service on the driver double: ok"
