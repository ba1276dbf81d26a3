#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fault isolation on a real GPU: a tenant that takes an illegal-address fault must not disturb a
# co-running guaranteed tenant (separate CUDA contexts, no MPS), and gpuosd must reclaim it.
# Usage (repo root, build tree at ./build): OUT=/results bash gpu/fault_isolation.sh
# Writes $OUT/fault_isolation.json; exit 0 when isolation held.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
B=${GPUOS_BUILD_DIR:-build}
W=/tmp/gpuos-fault; rm -rf "$W"; mkdir -p "$W"
export GPUOS_SOCKET=$W/gpuosd.sock
nvcc -O2 -arch=sm_90 -o "$W/faulty" gpu/tests/faulty.cu || exit 2
source gpu/lib/gpuosd.sh
gpuosd_start "$B/bin/gpuos" "$GPUOS_SOCKET" "$W/gpuosd.log" "$B/bin/gpuosd" --socket "$GPUOS_SOCKET" --policy priority
gpuosd_wait 5
# HP: ~6 s of 1.5 ms fixed-work kernels, closed loop with 1 ms gaps.
"$B/bin/gpuos" run --name hp --class guaranteed -- "$B/bin/gpuos-synth" --name hp --iters 125000 \
  --blocks-per-sm 8 --count 2400 --gap-us 1000 --json "$W/hp.json" >"$W/hp.log" 2>&1 &
hp=$!
sleep 2
t0=$(date +%s.%N)
"$B/bin/gpuos" run --name faulty --class best-effort -- "$W/faulty" >"$W/faulty.log" 2>&1
frc=$?
wait "$hp"; hrc=$?
sleep 0.5
"$B/bin/gpuos" ps --all --json >"$W/ps.json"
gpuosd_stop
python3 - "$W" "$frc" "$hrc" "$OUT/fault_isolation.json" <<'PY'
import json, sys
w, frc, hrc, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
hp = json.load(open(w + "/hp.json")) if hrc == 0 else {}
ps = json.load(open(w + "/ps.json"))
faulty = [t for t in ps["tenants"] if t["name"] == "faulty"]
res = {
    "faulty_exit": frc, "faulty_reported_illegal_address": frc == 3,
    "hp_exit": hrc, "hp_verified": hp.get("verified", False),
    "hp_p50_us": hp.get("p50_us"), "hp_p99_us": hp.get("p99_us"), "hp_max_us": hp.get("max_us"),
    "faulty_seen_exited_by_daemon": bool(faulty) and faulty[0]["state"] == "exited",
    "faulty_mem_after_exit": faulty[0]["mem_used_bytes"] if faulty else None,
    "faulty_log": open(w + "/faulty.log").read()[-400:],
}
res["passed"] = res["faulty_reported_illegal_address"] and hrc == 0 and res["hp_verified"] and res["faulty_seen_exited_by_daemon"]
json.dump(res, open(out, "w"), indent=1)
print(json.dumps(res, indent=1))
sys.exit(0 if res["passed"] else 1)
PY
