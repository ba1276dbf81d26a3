#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The raw NVML view behind gpuosd's usage check (issue #22, "trust but verify"), without gpuosd:
# gpuos-nvml-probe (the check's own NvmlReader over the real libnvidia-ml.so.1) watches a CUDA
# process that never goes through libgpuos.so (gpuos-synth: 2 GiB and fixed-work kernels) and says
#   - whether NVML lists its pid, with its bytes and its SM use;
#   - how old the process was (ms since it started) when NVML first listed it, first showed its
#     2 GiB, first saw its kernels: the floor under the check's reaction time, apart from the interval;
#   - what each NVML call costs (per call name: min / median / max over the rounds);
# first on an idle GPU, then for the process alone, then as an MPS client if nvidia-cuda-mps-control
# exists (a private control daemon: pipe and log directories in a temp dir, quit at the end). GPU
# settings are never changed. gpu/verify_nvml.sh covers the same check through gpuosd (findings,
# detection time after the offence, enforcement). On the H200 (driver 580, bench/results/
# 2026-12-04-nvml-probe): listed ~0.3 s after the process started, its 2 GiB ~0.4 s; a round
# ~1.6 ms, nearly all nvmlDeviceGetProcessUtilization; under MPS the client is listed with its
# bytes but its SM use is sampled only on the MPS server's pid, so the MPS case never sees the
# client active (mps_seen false; sm_util_by_pid shows the server).
# Usage (repo root, build tree at ./build with bin/gpuos-nvml-probe and bin/gpuos-synth, see
# scripts/gpu_carry.sh; LD_LIBRARY_PATH=$PWD/build/lib): OUT=/results bash gpu/nvml_probe.sh.
# Writes $OUT/nvml_probe.json (and logs under $OUT/logs). Exit 0 when NVML saw the process fully.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
BUILD=${GPUOS_BUILD_DIR:-build}
PROBE=$PWD/$BUILD/bin/gpuos-nvml-probe
SYNTH=$PWD/$BUILD/bin/gpuos-synth
W=$(mktemp -d /tmp/gpuos-nvml-probe.XXXXXX)
mkdir -p "$OUT/logs"
log() { echo "[nvml-probe $(date +%T)] $*"; }
SP=""
MPS_ON=""
mps_control() { CUDA_MPS_PIPE_DIRECTORY=$W/mps/pipe CUDA_MPS_LOG_DIRECTORY=$W/mps/log nvidia-cuda-mps-control "$@"; }
cleanup() {
  if [[ -n $SP ]]; then kill -9 "$SP" 2>/dev/null; wait "$SP" 2>/dev/null; fi
  if [[ -n $MPS_ON ]]; then
    echo quit | mps_control >/dev/null 2>&1
    for _ in $(seq 100); do [[ -e $W/mps/pipe/nvidia-cuda-mps-control.pid ]] || break; sleep 0.1; done
    cp -r "$W/mps/log" "$OUT/logs/nvml-probe-mps-log" 2>/dev/null
  fi
  rm -rf "$W"
}
trap cleanup EXIT

# Adds each listed pid's program name (while it still runs) to a probe's JSON, in place.
name_pids() {
  python3 - "$1" <<'EOF'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
for g in j.get("gpus", []):
    for q in g["processes"]:
        try:
            q["comm"] = open("/proc/%d/comm" % q["pid"]).read().strip()
        except OSError:
            q["comm"] = None
json.dump(j, open(p, "w"))
EOF
}

# run_case LABEL MIN_BYTES: gpuos-synth without the interposer, watched by the probe (every 20 ms,
# at least 50 rounds) until NVML listed it, showed MIN_BYTES and saw its kernels (at most 30 s).
run_case() {
  local label=$1 min=$2 rc
  env -u LD_PRELOAD "$SYNTH" --name "nvml-$label" --mem-mib 2048 --iters 1000000 --count 1000000 \
    --json "$W/synth-$label.json" >"$OUT/logs/synth-$label.log" 2>&1 &
  SP=$!
  "$PROBE" --watch "$SP" --min-bytes "$min" --interval-ms 20 --rounds 50 --timeout-ms 30000 \
    >"$W/$label.json" 2>"$OUT/logs/nvml-probe-$label.err"
  rc=$?
  name_pids "$W/$label.json"
  kill "$SP" 2>/dev/null
  wait "$SP" 2>/dev/null
  SP=""
  cp "$W/$label.json" "$OUT/logs/nvml-probe-$label.json"
  log "$label (probe exit $rc): $(python3 -c '
import json, sys
j = json.load(open(sys.argv[1])); w = j.get("watch", {})
print("pid %s listed at %s ms, its bytes at %s ms, active at %s ms; max %s bytes, %s%% SM; round %s us median" % (
    w.get("pid"), w.get("first_listed_ms"), w.get("first_bytes_ms"), w.get("first_active_ms"),
    w.get("max_bytes"), w.get("max_sm_util"), j.get("round_us", {}).get("median")))' "$W/$label.json" 2>&1)"
  return "$rc"
}

nvidia-smi >"$OUT/logs/nvml-probe-nvidia-smi.txt" 2>&1
"$PROBE" --rounds 50 --interval-ms 20 >"$W/idle.json" 2>"$OUT/logs/nvml-probe-idle.err"
name_pids "$W/idle.json"
log "idle: $(head -c 300 "$W/idle.json")"
run_case alone $((2 << 30))
ALONE=$?
MPS_RC=""
if command -v nvidia-cuda-mps-control >/dev/null; then
  mkdir -p "$W/mps/pipe" "$W/mps/log"
  if mps_control -d; then
    MPS_ON=1
    # An MPS client: NVML may not say its bytes (NVML_VALUE_NOT_AVAILABLE), so wait only for it to
    # be listed and active; max_bytes says what it showed.
    export CUDA_MPS_PIPE_DIRECTORY=$W/mps/pipe CUDA_MPS_LOG_DIRECTORY=$W/mps/log
    run_case mps 0
    MPS_RC=$?
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  else
    log "nvidia-cuda-mps-control -d failed: no MPS case"
  fi
else
  log "no nvidia-cuda-mps-control: no MPS case"
fi
python3 - "$W" "$OUT/nvml_probe.json" "$ALONE" "${MPS_RC:-}" <<'EOF'
import datetime, json, os, subprocess, sys
w, out, alone_rc, mps_rc = sys.argv[1:5]
def load(name):
    p = os.path.join(w, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
def smi(q):
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=" + q, "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.splitlines()[0].strip()
    except Exception:
        return None
r = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "gpu": smi("name"),
     "driver": smi("driver_version"), "idle": load("idle"), "alone": load("alone"), "alone_seen": alone_rc == "0"}
if mps_rc != "":
    r["mps"] = load("mps")
    r["mps_seen"] = mps_rc == "0"
json.dump(r, open(out, "w"), indent=2)
EOF
log "wrote $OUT/nvml_probe.json"
[[ $ALONE == 0 ]]
