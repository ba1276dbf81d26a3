#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpuosd's usage check (issue #22, "trust but verify") on a real GPU, with the real NVML: it must
# catch tenants that bypass libgpuos.so and processes that never registered, and say what it costs.
#   1. time-shared: a tenant (quota 1 GiB) that allocates 4 GiB through the driver's real entry
#      points (test/e2e/bypass_probe.cc: libc's dlsym, around libgpuos.so); a tenant whose gate an
#      admin closed that keeps the SMs busy the same way (gpu/tests/spin_kernel.cu); an honest
#      tenant whose long kernel was already running when its gate closed (must not be flagged);
#      a process on the GPU without the interposer;
#   2. the same bypassing tenant inside a spatial domain (MPS client), if MPS is installed.
# For each: whether it was caught, and how long after the offence (polling `gpuos ps` / metrics
# every 50 ms; the check runs every 200 ms here). The check's cost: NVML time per round (metrics).
# Usage (repo root, build tree at ./build with bin/gpuos-bypass-probe and lib/spin.cubin,
# see scripts/gpu_carry.sh): OUT=/results bash gpu/verify_nvml.sh. Writes $OUT/verify_nvml.json.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
BUILD=${GPUOS_BUILD_DIR:-build}
GPUOS=$PWD/$BUILD/bin/gpuos
PROBE=$PWD/$BUILD/bin/gpuos-bypass-probe
CUBIN=$PWD/$BUILD/lib/spin.cubin
W=$(mktemp -d /tmp/gpuos-verify.XXXXXX)
mkdir -p "$OUT/logs"
source gpu/lib/gpuosd.sh
log() { echo "[verify $(date +%T)] $*"; }
now_ms() { date +%s%3N; }
results=()

# Waits (50 ms polls, at most 20 s) until `gpuos ps --json` shows the tenant of pid $1 with a
# violation; prints "<ms> <verified_mem_bytes>", or "-1 0".
wait_violation() {
  local pid=$1 t0=$2 j
  for _ in $(seq 400); do
    j=$("$GPUOS" ps --json --socket "$SOCK" 2>/dev/null | python3 -c "
import json,sys
for t in json.load(sys.stdin)['tenants']:
    if t['pid']==$pid and t.get('violations',0)>0: print(t['verified_mem_bytes'])" 2>/dev/null)
    if [[ -n $j ]]; then echo "$(( $(now_ms) - t0 )) $j"; return; fi
    sleep 0.05
  done
  echo "-1 0"
}
# Starts the bypass probe, waits for its line (the offence happened), prints "<pid> <t0 ms>".
start_probe() {  # args: env-prefix... -- probe args
  local out=$W/probe.$RANDOM
  "$@" >"$out" 2>"$out.err" &
  local p=$!
  for _ in $(seq 400); do grep -q result "$out" && break; sleep 0.05; done
  cat "$out" "$out.err" >&2
  echo "$p $(now_ms)"
}

printf '[verify]\ninterval_ms = 200\n' >"$W/verify.toml"
SOCK=$W/gpuosd.sock
gpuosd_start_metrics "$GPUOS" "$SOCK" "$OUT/logs/verify-gpuosd.log" 10 \
  "$BUILD/bin/gpuosd" --socket "$SOCK" --config "$W/verify.toml"
log "gpuosd $GPUOSD_PID up, metrics port $GPUOSD_PORT"

# 1a. over quota through a hidden driver
read -r P T0 < <(start_probe "$GPUOS" run --socket "$SOCK" --name sly --mem 1GiB -- "$PROBE" --mib 4096 --hold-ms 15000)
read -r MS BYTES < <(wait_violation "$P" "$T0")
log "over quota: caught after $MS ms, NVML saw $BYTES bytes"
results+=("\"over_quota\": {\"caught\": $([[ $MS -ge 0 ]] && echo true || echo false), \"detect_ms\": $MS, \"verified_mem_bytes\": $BYTES, \"quota_bytes\": 1073741824, \"bypassed_bytes\": 4294967296}")
kill "$P" 2>/dev/null; wait "$P" 2>/dev/null

# 1b. launching while gated through a hidden driver: the admin closes its gate, it keeps the SMs busy
read -r P T0 < <(start_probe "$GPUOS" run --socket "$SOCK" --name spin -- "$PROBE" --cubin "$CUBIN" --mib 64 --spin-s 12 --hold-ms 0)
ID=$("$GPUOS" ps --json --socket "$SOCK" | python3 -c "import json,sys; print([t['id'] for t in json.load(sys.stdin)['tenants'] if t['pid']==$P][0])")
"$GPUOS" gate "$ID" close --socket "$SOCK" >/dev/null
T0=$(now_ms)
read -r MS BYTES < <(wait_violation "$P" "$T0")
log "launching while gated: caught $MS ms after the gate closed"
grep "launched\|used .* SMs while" "$OUT/logs/verify-gpuosd.log" | tail -1
results+=("\"launched_while_gated\": {\"caught\": $([[ $MS -ge 0 ]] && echo true || echo false), \"detect_ms_after_gate_closed\": $MS}")
kill "$P" 2>/dev/null; wait "$P" 2>/dev/null

# 1d. an honest best-effort tenant (every launch through libgpuos.so) whose one long kernel (~5 s)
# is already running when its gate closes: not a violation (issue #42: only launches made while
# the gate was closed count against a tenant, not its work in flight when it closed).
"$GPUOS" run --socket "$SOCK" --name honest --class best-effort -- "$BUILD/bin/gpuos-synth" --name honest \
  --iters 500000000 --blocks-per-sm 8 --block 256 --count 1 --warmup 0 --gap-us 0 --mem-mib 64 \
  >"$W/honest.out" 2>&1 &
P=$!
ID=""
for _ in $(seq 200); do
  ID=$("$GPUOS" ps --json --socket "$SOCK" 2>/dev/null | python3 -c "
import json,sys
for t in json.load(sys.stdin)['tenants']:
    if t['pid']==$P and t.get('launches',0)>0: print(t['id'])" 2>/dev/null)
  [[ -n $ID ]] && break
  sleep 0.05
done
sleep 1  # its kernel runs
"$GPUOS" gate "$ID" close --socket "$SOCK" >/dev/null
T0=$(now_ms)
read -r MS BYTES < <(wait_violation "$P" "$T0")  # 20 s: the kernel ends well within it
"$GPUOS" gate "$ID" open --socket "$SOCK" >/dev/null
wait "$P"; RC=$?
log "honest tenant with a kernel in flight at gate close: violation after $MS ms (-1 = none), exit $RC"
results+=("\"honest_inflight_at_gate_close\": {\"flagged\": $([[ $MS -ge 0 ]] && echo true || echo false), \"exit_code\": $RC}")

# 1c. a process on the GPU that never registered
read -r P T0 < <(start_probe env -u LD_PRELOAD "$PROBE" --mib 2048 --hold-ms 15000)
MS=-1
for _ in $(seq 400); do
  if [[ $(gpuosd_metric gpuos_daemon_unregistered_gpu_processes) -ge 1 ]] 2>/dev/null; then MS=$(( $(now_ms) - T0 )); break; fi
  sleep 0.05
done
log "unregistered process: reported after $MS ms"
results+=("\"unregistered\": {\"caught\": $([[ $MS -ge 0 ]] && echo true || echo false), \"detect_ms\": $MS}")
kill "$P" 2>/dev/null; wait "$P" 2>/dev/null
ROUNDS=$(gpuosd_metric gpuos_daemon_usage_checks_total)
SECS=$(gpuosd_metric gpuos_daemon_usage_check_seconds_total)
COST_US=$(python3 -c "print(round(float('${SECS:-0}')/max(1,int('${ROUNDS:-0}'))*1e6, 1))")
log "check cost: $COST_US us of NVML per round over $ROUNDS rounds"
results+=("\"check_cost_us_per_round\": $COST_US, \"rounds\": ${ROUNDS:-0}, \"interval_ms\": 200")
gpuosd_stop

# 2. under MPS: the bypassing tenant is a client of a domain's MPS server
if command -v nvidia-cuda-mps-control >/dev/null; then
  source gpu/lib/space_domain.sh
  start_space_domain "$GPUOS" "$W" serve "$OUT/logs/verify-mps-gpuosd.log" '[verify]' 'interval_ms = 200'
  SOCK=$GPUOS_SOCKET
  gpuosd_metrics_up
  read -r P T0 < <(start_probe "$GPUOS" run --socket "$SOCK" --space serve --name sly-mps --mem 1GiB -- "$PROBE" --mib 4096 --hold-ms 15000)
  read -r MS BYTES < <(wait_violation "$P" "$T0")
  log "under MPS, over quota: caught after $MS ms, NVML saw $BYTES bytes"
  "$GPUOS" ps --socket "$SOCK" | tail -3
  results+=("\"mps_over_quota\": {\"caught\": $([[ $MS -ge 0 ]] && echo true || echo false), \"detect_ms\": $MS, \"verified_mem_bytes\": $BYTES}")
  kill "$P" 2>/dev/null; wait "$P" 2>/dev/null
  gpuosd_stop
  sleep 2  # gpuosd quits the domain's MPS control daemon as it exits
fi
drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
( IFS=,; echo "{\"date\": \"$(date -Is)\", \"gpu\": \"$gpu\", \"driver\": \"$drv\", ${results[*]}}" ) | python3 -m json.tool >"$OUT/verify_nvml.json"
cat "$OUT/verify_nvml.json"
rm -rf "$W"
