#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue #40 item 2 on a GPU: a budgeted guaranteed tenant's long launches learned from its own
# timings, no engine hint. Under a private gpuosd (--policy budget), gpuos-synth with
# --long-every 10 (every 10th kernel twice the grid and four times the work: a prefill among decode
# steps) must have launches marked long in `gpuos ps --json` (long_launches), and the same synth
# without it none; the server's long launches are judged as admissions (its slowdown_admission in
# ps), the steady one has none. Writes $OUT/learned_phase.json (with GPUOS_COMMIT, else git's HEAD); exit 1 when
# either does not hold.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
BUILD=${GPUOS_BUILD_DIR:-build}
mkdir -p "$OUT/logs"
sock=/tmp/gpuos-phase/gpuosd.sock
mkdir -p /tmp/gpuos-phase
source gpu/lib/gpuosd.sh
gpuosd_start "$BUILD/bin/gpuos" "$sock" "$OUT/logs/phase-gpuosd.log" "$BUILD/bin/gpuosd" --socket "$sock" \
  --policy budget
gpuosd_wait 5 || { echo "gpuosd did not start"; exit 1; }
run() {  # NAME EXTRA...: the synth under a budget (`ps --all` keeps it once it exited)
  local name=$1
  shift
  "$BUILD/bin/gpuos" run --socket "$sock" --name "$name" --class guaranteed --max-slowdown 1.5 -- \
    "$BUILD/bin/gpuos-synth" --name "$name" --iters 200000 --count 400 --warmup 0 --json - "$@" \
    >"$OUT/logs/phase-$name.json" 2>"$OUT/logs/phase-$name.err" || echo "synth $name failed"
}
run server --long-every 10
run steady
"$BUILD/bin/gpuos" ps --json --all --socket "$sock" >"$OUT/logs/phase-ps.json"
gpuosd_stop
commit=${GPUOS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || true)}
python3 - "$OUT/logs/phase-ps.json" "$OUT/learned_phase.json" "$commit" <<'PY'
import json, sys
ps = json.load(open(sys.argv[1]))
by = {t["name"]: t for t in ps["tenants"]}
r = {name: {k: by.get(name, {}).get(k) for k in ("launches", "long_launches", "space_kernel_us", "slowdown",
                                                  "slowdown_admission")}
     for name in ("server", "steady")}
r["commit"] = sys.argv[3]
r["ok"] = ((r["server"]["long_launches"] or 0) >= 10 and r["steady"]["long_launches"] == 0 and
           r["server"]["slowdown_admission"] is not None and r["steady"]["slowdown_admission"] is None)
json.dump(r, open(sys.argv[2], "w"), indent=1)
print(json.dumps(r))
sys.exit(0 if r["ok"] else 1)
PY
