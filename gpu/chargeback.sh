#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Chargeback on a real GPU (issue #43 item 9): two synthetic tenants share GPU 0 for ~20 s under a
# private gpuosd (usage check every 200 ms); their energy (ps --all --json energy_joules, NVML's
# counter split by GPU time) must add up to within 5% of the GPU's own NVML energy delta over the
# run, read here independently (ctypes, nvmlDeviceGetTotalEnergyConsumption) just before the first
# tenant starts and just after the last exits. Also reports gpuosd's own count
# (gpuos_gpu_energy_joules_total, _attributed_) and each tenant's GPU time.
# Usage (repo root, build tree at ./build with bin/gpuos-synth, see scripts/gpu_carry.sh):
#   OUT=/results bash gpu/chargeback.sh. Writes $OUT/chargeback.json.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
BUILD=${GPUOS_BUILD_DIR:-build}
GPUOS=$PWD/$BUILD/bin/gpuos
SYNTH=$PWD/$BUILD/bin/gpuos-synth
SECONDS_RUN=${CHARGEBACK_SECONDS:-20}
W=$(mktemp -d /tmp/gpuos-chargeback.XXXXXX)
mkdir -p "$OUT/logs"
source gpu/lib/gpuosd.sh
log() { echo "[chargeback $(date +%T)] $*"; }
# The GPU's NVML energy counter (mJ since the driver loaded), GPU 0.
nvml_mj() {
  python3 - <<'PY'
import ctypes
n = ctypes.CDLL("libnvidia-ml.so.1")
assert n.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert n.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
e = ctypes.c_ulonglong()
r = n.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(e))
print(e.value if r == 0 else -1)
n.nvmlShutdown()
PY
}

printf '[verify]\ninterval_ms = 200\n' >"$W/gpuosd.toml"
SOCK=$W/gpuosd.sock
gpuosd_start_metrics "$GPUOS" "$SOCK" "$OUT/logs/chargeback-gpuosd.log" 10 \
  "$BUILD/bin/gpuosd" --socket "$SOCK" --config "$W/gpuosd.toml"
log "gpuosd $GPUOSD_PID up, metrics port $GPUOSD_PORT"
GPU_MJ0=$(gpuosd_metric 'gpuos_gpu_energy_joules_total{gpu="0"}')

E0=$(nvml_mj)
T0=$(date +%s.%N)
# Two tenants of unequal demand: "heavy" back to back, "light" with 3 ms gaps between 1.5 ms
# kernels; both best-effort, time-shared. Each stops after SECONDS_RUN (count far above it).
timeout -s INT "$SECONDS_RUN" "$GPUOS" run --socket "$SOCK" --name heavy -- "$SYNTH" --name heavy --iters 125000 \
  --blocks-per-sm 8 --count 1000000 --gap-us 0 >"$W/heavy.log" 2>&1 &
HEAVY=$!
timeout -s INT "$SECONDS_RUN" "$GPUOS" run --socket "$SOCK" --name light -- "$SYNTH" --name light --iters 125000 \
  --blocks-per-sm 8 --count 1000000 --gap-us 3000 >"$W/light.log" 2>&1 &
LIGHT=$!
wait "$HEAVY" "$LIGHT"
sleep 0.5  # gpuosd takes the exits (each tenant's last round is counted before its exit)
E1=$(nvml_mj)
T1=$(date +%s.%N)
"$GPUOS" ps --all --json --socket "$SOCK" >"$W/ps.json"
GPU_MJ1=$(gpuosd_metric 'gpuos_gpu_energy_joules_total{gpu="0"}')
ATTR=$(gpuosd_metric 'gpuos_gpu_energy_attributed_joules_total{gpu="0"}')
gpuosd_stop
cp "$W/ps.json" "$OUT/logs/chargeback-ps.json"

drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
python3 - "$W/ps.json" "$E0" "$E1" "$T0" "$T1" "${GPU_MJ0:-0}" "${GPU_MJ1:-0}" "${ATTR:-0}" "$gpu" "$drv" \
  "$OUT/chargeback.json" <<'PY'
import json, sys
ps, e0, e1, t0, t1, g0, g1, attr, gpu, drv, out = sys.argv[1:]
tenants = [t for t in json.load(open(ps))["tenants"] if t.get("name") in ("heavy", "light")]
nvml_j = (int(e1) - int(e0)) / 1e3 if int(e0) >= 0 and int(e1) >= 0 else None
tenant_j = sum(t.get("energy_joules", 0) for t in tenants)
err = abs(tenant_j - nvml_j) / nvml_j if nvml_j else None
r = {
    "gpu": gpu, "driver": drv, "seconds": round(float(t1) - float(t0), 2),
    "nvml_energy_delta_joules": nvml_j,
    "tenants_energy_joules": round(tenant_j, 3),
    "relative_error": round(err, 4) if err is not None else None,
    "within_5_percent": err is not None and err <= 0.05,
    "gpuosd_gpu_energy_joules": round(float(g1) - float(g0), 3),
    "gpuosd_attributed_joules": float(attr),
    "tenants": [{k: t.get(k) for k in ("name", "pid", "gpu_seconds", "energy_joules", "launches")} for t in tenants],
}
json.dump(r, open(out, "w"), indent=2)
print(json.dumps(r, indent=2))
PY
rm -rf "$W"
