#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Windows in time (issue #56 item 3): how long a latency-critical (HP) kernel released at a random
# moment waits to start while a best-effort (BE) kernel of ~1, 5 or 28 ms holds the GPU, under the
# driver's time-slicing (two processes, no MPS), MPS with client priorities (BE at priority 1, HP at
# 0) and gpuos's gate (both under `gpuos run` with a private gpuosd, policy priority: HP guaranteed,
# BE best-effort), beside HP alone; and what a context switch costs outside MPS (the other process
# holding an idle context, pinging tiny kernels, or running the longest BE kernel: HP's start delay
# then is the time-slice preemption). gpu/tests/window_bench.cu does the measuring (fixed-work kernels
# calibrated on the device, %globaltimer at the HP kernel's start against the host's launch time,
# aligned per process by the minimum while alone); gpu/window_bench_report.py turns the runs into
# window_bench.json and window_bench.md. Changes no GPU setting.
#
#   OUT=/results bash gpu/window_bench.sh       (repo root; ./build or a carried .gpucarry linked as build)
#   bash gpu/window_bench.sh dry-run            (prints the plan and its time estimate, runs nothing)
#
# Runs (RUNS, default all, in this order; a run is one HP process and at most one companion):
#   exclusive          HP alone, no MPS                    (the reference; "exclusive-again" at the end: drift)
#   ctx-idle           + a process holding an idle context (context switch, idle)
#   ctx-after-other    + a process running a tiny kernel every PING_US (HP's context is switched in)
#   time-slicing-<ms>  + BE kernels of <ms> back to back, 2 in flight, no MPS
#   exclusive-gpuos    HP alone under gpuos run (guaranteed), private gpuosd --policy priority
#   gpuos-gate-<ms>    + BE under gpuos run (best-effort)
#   exclusive-mps      HP alone as a client of a private MPS control daemon (priority 0)
#   mps-prio-<ms>      + BE as an MPS client at CUDA_MPS_CLIENT_PRIORITY=1
# Settings: BE_MS ("1 5 28"), RELEASES (300 HP kernels a run), CALIB (200 launches alone before and
#   after), GAP_MIN_MS/GAP_MAX_MS (2/20: HP's uniform random gap), HP_US (30: HP kernel alone),
#   BE_WAVES (1: a BE kernel is one wave of 2 x 1024-thread blocks per SM; N: N waves of blocks
#   N times shorter), PING_US (1000), SEED (1: every run the same gaps), TIME_S (450: no run
#   begins that would end past it), WINDOW_BENCH (a built binary; default build/bin/window_bench if its version matches the
#   source, else nvcc -O2 -arch=sm_90 here), NVCC, PYTHON, MPS_CONTROL, GPUOS_BUILD_DIR (build),
#   GPUOS_COMMIT (recorded when `git rev-parse HEAD` does not work).
# Writes $OUT/window_bench.json, $OUT/window_bench.md and $OUT/window_bench_logs.tgz (every
# process's raw JSON and log, calibration, gpuosd's log and ps, MPS logs). Exit 0 when every run
# ran and measured; else 1 (what was measured is still written), 2 for a bad setting.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

BE_MS=${BE_MS:-1 5 28}
RELEASES=${RELEASES:-300}
CALIB=${CALIB:-200}
GAP_MIN_MS=${GAP_MIN_MS:-2}
GAP_MAX_MS=${GAP_MAX_MS:-20}
HP_US=${HP_US:-30}
BE_WAVES=${BE_WAVES:-1}
PING_US=${PING_US:-1000}
SEED=${SEED:-1}
TIME_S=${TIME_S:-450}
PY=${PYTHON:-python3}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
MPS_CONTROL=${MPS_CONTROL:-nvidia-cuda-mps-control}
BUILD=${GPUOS_BUILD_DIR:-build}
READY_S=${READY_S:-60}   # a process's context, calibration or first kernels
STOP_GRACE_S=10          # after SIGTERM, before SIGKILL of its process group
# Every variable a run sets itself; each process starts with them unset.
CLEAR=(-u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY -u CUDA_MPS_CLIENT_PRIORITY
       -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE -u CUDA_DEVICE_MAX_CONNECTIONS -u LD_PRELOAD -u GPUOS_SOCKET)

num() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]]; }
for v in RELEASES CALIB GAP_MIN_MS GAP_MAX_MS HP_US BE_WAVES PING_US SEED TIME_S; do
  num "${!v}" || { echo "window_bench.sh: $v=${!v} is not a number" >&2; exit 2; }
done
read -ra BE_ARR <<<"$BE_MS"
((${#BE_ARR[@]} > 0)) || { echo "window_bench.sh: BE_MS is empty" >&2; exit 2; }
for ms in "${BE_ARR[@]}"; do num "$ms" || { echo "window_bench.sh: BE_MS: $ms is not a number" >&2; exit 2; }; done
awk -v a="$GAP_MIN_MS" -v b="$GAP_MAX_MS" 'BEGIN { exit !(a <= b) }' ||
  { echo "window_bench.sh: GAP_MIN_MS > GAP_MAX_MS" >&2; exit 2; }

default_runs() {
  local ms out="exclusive ctx-idle ctx-after-other"
  for ms in "${BE_ARR[@]}"; do out+=" time-slicing-$ms"; done
  out+=" exclusive-gpuos"
  for ms in "${BE_ARR[@]}"; do out+=" gpuos-gate-$ms"; done
  out+=" exclusive-mps"
  for ms in "${BE_ARR[@]}"; do out+=" mps-prio-$ms"; done
  echo "$out exclusive-again"
}
RUNS=${RUNS:-$(default_runs)}

# run_spec NAME: "SETTING COMPANION BE_MS" (setting none|gpuos|mps; companion none|idle|ping|run;
# BE_MS - without a BE); fails for an unknown name.
run_spec() {
  case $1 in
    exclusive | exclusive-again) echo "none none -" ;;
    ctx-idle) echo "none idle -" ;;
    ctx-after-other) echo "none ping -" ;;
    exclusive-gpuos) echo "gpuos none -" ;;
    exclusive-mps) echo "mps none -" ;;
    time-slicing-*) num "${1#time-slicing-}" && echo "none run ${1#time-slicing-}" ;;
    gpuos-gate-*) num "${1#gpuos-gate-}" && echo "gpuos run ${1#gpuos-gate-}" ;;
    mps-prio-*) num "${1#mps-prio-}" && echo "mps run ${1#mps-prio-}" ;;
    *) return 1 ;;
  esac
}

# est_s NAME: seconds the run should take at most (startup, calibration, releases; a contended HP
# release assumed to wait a whole BE kernel).
est_s() {
  local setting kind ms
  read -r setting kind ms <<<"$(run_spec "$1")"
  [[ $ms == - ]] && ms=0
  awk -v r="$RELEASES" -v c="$CALIB" -v a="$GAP_MIN_MS" -v b="$GAP_MAX_MS" -v hp="$HP_US" -v ms="$ms" \
    -v mps="$([[ $setting == mps ]] && echo 1 || echo 0)" \
    'BEGIN { printf "%d\n", 4 + 2 * mps + (r * ((a + b) / 2 + hp / 1000 + ms + 0.2) + 2 * c * 0.7) / 1000 + 0.999 }'
}

for r in $RUNS; do
  run_spec "$r" >/dev/null || { echo "window_bench.sh: unknown run $r" >&2; exit 2; }
done

print_plan() {
  local r total=40 e
  echo "window_bench plan: $RELEASES HP releases a run (gaps uniform in [$GAP_MIN_MS, $GAP_MAX_MS] ms)," \
    "HP kernel ~$HP_US us, BE kernels ~$BE_MS ms, $CALIB calibration launches alone before and after"
  for r in $RUNS; do
    e=$(est_s "$r")
    total=$((total + e))
    printf '  %-22s %-34s ~%3d s\n' "$r" \
      "$(run_spec "$r" | awk '{printf "%s, companion %s%s", $1, $2, ($3 == "-" ? "" : " (" $3 " ms)")}')" "$e"
  done
  echo "estimate: ~$total s (with ~40 s for the build, the calibration and the daemons' starts and stops);" \
    "no run begins past TIME_S=$TIME_S s"
}

if [[ ${1:-} == dry-run ]]; then
  print_plan
  exit 0
fi
[[ -n ${1:-} ]] && { echo "usage: OUT=DIR bash gpu/window_bench.sh [dry-run]" >&2; exit 2; }

: "${OUT:?set OUT}"
mkdir -p "$OUT" || exit 2
print_plan
W=$(mktemp -d /tmp/wb-XXXX) || exit 2   # short: MPS's pipe and gpuosd's socket are socket paths
LOGS=$W/logs
RUNDIR=$W/runs
mkdir -p "$LOGS" "$RUNDIR" "$W/no-mps"
# Without MPS: the MPS variables unset, as any program starts; only where an MPS daemon not ours runs
# (it may listen at the default pipe directory) an empty pipe directory, so that none is joined.
NO_MPS_ENV=()
MPS_PIPE=$W/mps-pipe
MPS_LOG=$W/mps-log
MPS_ON=0
SOCK=$W/gpuosd.sock
GPUOS_CFG=$W/gpuos.toml
FAILED=0
HP_PID='' BE_PID=''
log() { echo "[window_bench $(date +%T)] $*" | tee -a "$LOGS/run.log"; }
fail() { FAILED=1; log "FAILED: $*"; }
export LD_LIBRARY_PATH="$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
source gpu/lib/gpuosd.sh

# ---- processes: each under timeout (its own process group), stopped by pid ----

# stop_proc PID: SIGTERM, then SIGKILL to its process group after STOP_GRACE_S; reaps it and
# returns its exit status.
stop_proc() {
  local pid=$1 _
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq $((STOP_GRACE_S * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "pid $pid did not end on SIGTERM: killed"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
}

# wait_exit PID SECONDS: waits for it to end by itself (then stops it); returns its exit status.
wait_exit() {
  local pid=$1 end=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.05; done
  kill -0 "$pid" 2>/dev/null && log "pid $pid still running after $2 s: stopping it"
  stop_proc "$pid"
}

# wait_file FILE SECONDS PID: 0 once FILE exists; 1 at the time limit or when PID ended without it.
wait_file() {
  local f=$1 end=$((SECONDS + $2)) pid=$3
  while [[ ! -e $f ]]; do
    if ((SECONDS >= end)) || ! kill -0 "$pid" 2>/dev/null; then [[ -e $f ]]; return; fi
    sleep 0.02
  done
}

# ---- MPS: a private control daemon (pipe and log directories under $W), quit on every way out ----

mps_pids() {  # our MPS daemon and server: comm nvidia-cuda-mps* with our pipe directory in the environment
  local p c
  for p in /proc/[0-9]*; do
    read -r c 2>/dev/null <"$p/comm" || continue
    [[ $c == nvidia-cuda-mps* ]] || continue
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "CUDA_MPS_PIPE_DIRECTORY=$MPS_PIPE" && printf '%s ' "${p#/proc/}"
  done
}

mps_server_seen() {  # an nvidia-cuda-mps-server of our daemon runs (a client has connected)
  local p
  for p in $(mps_pids); do
    tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -q 'mps-server' && return 0
  done
  return 1
}

start_mps() {
  mkdir -p "$MPS_PIPE" "$MPS_LOG"
  MPS_ON=1
  CUDA_MPS_PIPE_DIRECTORY=$MPS_PIPE CUDA_MPS_LOG_DIRECTORY=$MPS_LOG timeout 20 "$MPS_CONTROL" -d \
    >"$LOGS/mps-start.out" 2>&1 </dev/null
  local rc=$? _
  ((rc == 0)) || { log "MPS control daemon did not start (rc $rc)"; return 1; }
  for _ in $(seq 100); do
    [[ -e $MPS_PIPE/control ]] && { log "MPS control daemon up ($MPS_PIPE)"; return 0; }
    sleep 0.1
  done
  log "MPS control daemon: no $MPS_PIPE/control after 10 s"
  return 1
}

stop_mps() {
  ((MPS_ON)) || return 0
  MPS_ON=0
  echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPS_PIPE CUDA_MPS_LOG_DIRECTORY=$MPS_LOG timeout 30 "$MPS_CONTROL" \
    >>"$LOGS/mps-stop.out" 2>&1
  local left _
  for _ in $(seq 150); do
    left=$(mps_pids)
    [[ -z $left ]] && break
    sleep 0.1
  done
  if [[ -n $left ]]; then
    log "MPS processes $left outlived quit: killed"
    # shellcheck disable=SC2086  # a list of pids
    kill -9 $left 2>/dev/null
  fi
  mkdir -p "$LOGS/mps"
  cp "$MPS_LOG"/*.log "$LOGS/mps/" 2>/dev/null
  log "MPS control daemon stopped"
  sleep 0.5  # the server lets the GPU go
}

# ---- gpuosd: private, policy priority, no metrics endpoint, tenants refused without it ----

GPUOS_UP=0
start_gpuosd() {
  [[ -x $BUILD/bin/gpuos && -x $BUILD/bin/gpuosd && -e $BUILD/lib/libgpuos.so ]] || {
    log "no gpuos build at $BUILD (bin/gpuos, bin/gpuosd, lib/libgpuos.so)"
    return 1
  }
  printf '[tenants]\non_no_daemon = "refuse"\nguaranteed = "anyone"\n' >"$GPUOS_CFG"
  gpuosd_start "$BUILD/bin/gpuos" "$SOCK" "$LOGS/gpuosd.log" "$BUILD/bin/gpuosd" --config "$GPUOS_CFG" \
    --socket "$SOCK" --policy priority --metrics-listen "" --log-level info
  if gpuosd_wait 10; then
    GPUOS_UP=1
    log "gpuosd up (pid $GPUOSD_PID, policy priority)"
    return 0
  fi
  log "gpuosd did not answer within 10 s (logs/gpuosd.log)"
  gpuosd_stop 5
  return 1
}

stop_gpuosd() {
  ((GPUOS_UP)) || return 0
  GPUOS_UP=0
  timeout 10 "$BUILD/bin/gpuos" ps --json --all --socket "$SOCK" >"$LOGS/gpuos-ps.json" 2>"$LOGS/gpuos-ps.err" ||
    log "gpuos ps failed (logs/gpuos-ps.err)"
  gpuosd_stop 10 "$LOGS/gpuosd_status.json" || log "gpuosd exited with status $?"
  log "gpuosd stopped"
}

# enter SETTING: the daemons of this setting up, the others' down. Fails when they did not come up.
SETTING=none
BROKEN=
enter() {
  if [[ $1 != "$SETTING" ]]; then
    [[ $1 != gpuos ]] && stop_gpuosd
    [[ $1 != mps ]] && stop_mps
    SETTING=$1
    case $1 in
      gpuos) start_gpuosd || BROKEN+=" gpuos" ;;
      mps) start_mps || BROKEN+=" mps" ;;
    esac
  fi
  [[ " $BROKEN " != *" $1 "* ]]
}

# ---- one run ----

meta() { printf '%s=%s\n' "$2" "$3" >>"$RUNDIR/$1/meta.txt"; }
run_error() { meta "$1" error "$2"; fail "$1: $2"; }

# set_prefix SETTING ROLE NAME: PFX, the command prefix of the HP or its companion in this setting.
set_prefix() {
  local setting=$1 role=$2 name=$3
  PFX=(env "${CLEAR[@]}")
  case $setting in
    none) PFX+=("${NO_MPS_ENV[@]}") ;;
    mps) PFX+=("CUDA_MPS_PIPE_DIRECTORY=$MPS_PIPE" "CUDA_MPS_LOG_DIRECTORY=$MPS_LOG"
               "CUDA_MPS_CLIENT_PRIORITY=$([[ $role == hp ]] && echo 0 || echo 1)") ;;
    gpuos) PFX+=("${NO_MPS_ENV[@]}" "$BUILD/bin/gpuos" run --config "$GPUOS_CFG" --socket "$SOCK" --name "$role-$name"
                 --class "$([[ $role == hp ]] && echo guaranteed || echo best-effort)" --) ;;
  esac
}

run_one() {
  local name=$1 setting kind ms d=$RUNDIR/$1 e rc be_iters=
  read -r setting kind ms <<<"$(run_spec "$name")"
  mkdir -p "$d"
  : >"$d/meta.txt"
  meta "$name" setting "$setting"
  meta "$name" companion "$kind"
  meta "$name" be_ms "$ms"
  e=$(est_s "$name")
  if ((SECONDS + e > TIME_S)); then
    run_error "$name" "skipped: $SECONDS s gone, ~$e s more would pass TIME_S=$TIME_S"
    return
  fi
  if ! enter "$setting"; then
    run_error "$name" "not run: the $setting setting did not come up (see run.log)"
    return
  fi
  if [[ $kind == run ]]; then
    be_iters=$(timeout 30 "$PY" -c 'import json, sys
for b in json.load(open(sys.argv[1]))["be"]:
    if abs(b["target_ms"] - float(sys.argv[2])) < 1e-9: print(b["iters"])' "$W/calibrate.json" "$ms")
    [[ -n $be_iters ]] || { run_error "$name" "no calibrated BE iteration count for $ms ms"; return; }
  fi
  log "$name: $setting, companion $kind$([[ $ms != - ]] && echo " ($ms ms, $be_iters iters)") (~$e s)"
  local -a hp_pre be_pre
  set_prefix "$setting" hp "$name"
  hp_pre=("${PFX[@]}")
  set_prefix "$setting" be "$name"
  be_pre=("${PFX[@]}")
  local rel_s
  rel_s=$(awk -v r="$RELEASES" -v b="$GAP_MAX_MS" -v ms="$([[ $ms == - ]] && echo 0 || echo "$ms")" \
    'BEGIN { printf "%d\n", 20 + r * (b + 3 * ms + 10) / 1000 }')
  local t0=$SECONDS
  timeout -k 5 $((rel_s + 3 * READY_S + 60)) "${hp_pre[@]}" "$BIN" hp --iters "$HP_ITERS" --releases "$RELEASES" \
    --calib "$CALIB" --gap-min-ms "$GAP_MIN_MS" --gap-max-ms "$GAP_MAX_MS" --seed "$SEED" --wait-s $((rel_s + READY_S)) \
    --ready-file "$d/hp.ready" --go-file "$d/go" --released-file "$d/hp.released" --quiet-file "$d/quiet" \
    --out "$d/hp.json" >"$d/hp.log" 2>&1 &
  HP_PID=$!
  if ! wait_file "$d/hp.ready" "$READY_S" "$HP_PID"; then
    stop_proc "$HP_PID"
    rc=$?
    HP_PID=
    run_error "$name" "HP did not get ready (rc $rc; see $name/hp.log)"
    return
  fi
  if [[ $kind != none ]]; then
    timeout -k 5 $((rel_s + 2 * READY_S + 60)) "${be_pre[@]}" "$BIN" be --kind "$kind" \
      ${be_iters:+--iters "$be_iters"} --waves "$BE_WAVES" --ping-us "$PING_US" --max-s $((rel_s + 2 * READY_S)) \
      --ready-file "$d/be.ready" --out "$d/be.json" >"$d/be.log" 2>&1 &
    BE_PID=$!
    if ! wait_file "$d/be.ready" "$READY_S" "$BE_PID"; then
      stop_proc "$BE_PID"
      rc=$?
      BE_PID=
      stop_proc "$HP_PID"  # it waits for its go file: SIGTERM ends the wait
      HP_PID=
      run_error "$name" "the companion did not get ready (rc $rc; see $name/be.log)"
      return
    fi
  fi
  if [[ $setting == mps ]]; then
    if mps_server_seen; then meta "$name" mps_server seen; else meta "$name" mps_server "not seen"; fi
  fi
  touch "$d/go"
  if ! wait_file "$d/hp.released" "$rel_s" "$HP_PID"; then
    run_error "$name" "HP did not finish its releases within $rel_s s (see $name/hp.log)"
  fi
  if [[ -n $BE_PID ]]; then
    stop_proc "$BE_PID"
    rc=$?
    BE_PID=
    meta "$name" be_rc "$rc"
    ((rc == 0)) || run_error "$name" "the companion exited with status $rc (see $name/be.log)"
  fi
  touch "$d/quiet"
  wait_exit "$HP_PID" 30
  rc=$?
  HP_PID=
  meta "$name" hp_rc "$rc"
  meta "$name" seconds $((SECONDS - t0))
  ((rc == 0)) || run_error "$name" "HP exited with status $rc (see $name/hp.log)"
  log "$name: done in $((SECONDS - t0)) s (HP rc $rc)"
}

# ---- the end, on every way out: children stopped, daemons down, the report, the logs ----

REPORTED=0
finish() {
  local rc=$?
  trap - EXIT INT TERM
  [[ -n $BE_PID ]] && stop_proc "$BE_PID"
  [[ -n $HP_PID ]] && stop_proc "$HP_PID"
  stop_gpuosd
  stop_mps
  if ((!REPORTED)); then
    REPORTED=1
    local commit
    commit=$(git rev-parse HEAD 2>/dev/null) || commit=${GPUOS_COMMIT:-unknown}
    timeout 120 "$PY" gpu/window_bench_report.py --work "$W" --out "$OUT" --commit "$commit" \
      --commit-env "${GPUOS_COMMIT:-}" --runs "$RUNS" >"$LOGS/report.out" 2>&1
    local rrc=$?
    cat "$LOGS/report.out"
    if ((rrc != 0)); then
      log "the report says the benchmark failed, or could not be written (rc $rrc)"
      ((rc == 0)) && rc=1
    fi
  fi
  ((FAILED && rc == 0)) && rc=1
  find "$W" \( -type s -o -type p \) -delete 2>/dev/null  # sockets and pipes do not travel
  log "exit $rc: $OUT/window_bench.json, window_bench.md, window_bench_logs.tgz"
  tar -C "$W" -czf "$OUT/window_bench_logs.tgz" logs runs calibrate.json settings.txt gpuos.toml 2>/dev/null
  rm -rf "$W"
  exit "$rc"
}
trap finish EXIT
trap 'log "interrupted"; exit 130' INT TERM

# ---- the machine, the binary, the calibration ----

timeout 20 nvidia-smi >"$LOGS/nvidia-smi.txt" 2>&1
timeout 20 nvidia-smi --query-gpu=name,driver_version,compute_mode,persistence_mode,clocks.sm,clocks.max.sm \
  --format=csv >"$LOGS/nvidia-smi.csv" 2>&1
DRIVER=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
printf 'driver_version=%s\nreleases=%s\ncalib=%s\ngap_min_ms=%s\ngap_max_ms=%s\nhp_us=%s\nping_us=%s\nseed=%s\nbe_ms=%s\nbe_waves=%s\n' \
  "${DRIVER:-unknown}" "$RELEASES" "$CALIB" "$GAP_MIN_MS" "$GAP_MAX_MS" "$HP_US" "$PING_US" "$SEED" "$BE_MS" "$BE_WAVES" \
  >"$W/settings.txt"
grep -qi 'exclusive' "$LOGS/nvidia-smi.csv" &&
  log "note: the GPU's compute mode is exclusive: two processes without MPS cannot share it (not changed here)"
foreign=$(for p in /proc/[0-9]*; do
  read -r c 2>/dev/null <"$p/comm" && [[ $c == nvidia-cuda-mps* ]] && printf '%s ' "${p#/proc/}"
done)
if [[ -n $foreign ]]; then
  log "note: MPS processes not ours run (pids $foreign); the no-MPS runs use an empty pipe directory"
  NO_MPS_ENV=("CUDA_MPS_PIPE_DIRECTORY=$W/no-mps" "CUDA_MPS_LOG_DIRECTORY=$W/no-mps")
fi

if [[ ! -x $BUILD/bin/gpuos && -x .gpucarry/bin/gpuos && ! -e $BUILD ]]; then
  log "linking the carried .gpucarry as ./$BUILD"
  ln -sfn .gpucarry "$BUILD"
fi
want=$(sed -n 's/^#define WINDOW_BENCH_VERSION \([0-9][0-9]*\)$/\1/p' gpu/tests/window_bench.cu)
BIN=${WINDOW_BENCH:-}
if [[ -z $BIN && -x $BUILD/bin/window_bench && $(timeout 10 "$BUILD/bin/window_bench" version 2>/dev/null) == "window_bench $want" ]]; then
  BIN=$BUILD/bin/window_bench
fi
if [[ -z $BIN ]]; then
  log "build: $NVCC -O2 -arch=sm_90 gpu/tests/window_bench.cu"
  if ! timeout 300 "$NVCC" -O2 -arch=sm_90 -o "$W/window_bench" gpu/tests/window_bench.cu >"$LOGS/nvcc.log" 2>&1; then
    cat "$LOGS/nvcc.log"
    fail "nvcc failed (logs/nvcc.log)"
    exit 1
  fi
  BIN=$W/window_bench
fi
log "binary: $BIN ($(timeout 10 "$BIN" version))"

log "calibrating (alone, no MPS)"
timeout -k 5 120 env "${CLEAR[@]}" "${NO_MPS_ENV[@]}" \
  "$BIN" calibrate --hp-us "$HP_US" --be-waves "$BE_WAVES" --be-ms "$(IFS=,; echo "${BE_ARR[*]}")" --out "$W/calibrate.json" \
  >"$LOGS/calibrate.log" 2>&1
rc=$?
cat "$LOGS/calibrate.log"
HP_ITERS=$(timeout 30 "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["hp"]["iters"])' "$W/calibrate.json" 2>/dev/null)
if ((rc != 0)) || [[ -z $HP_ITERS ]]; then
  fail "calibration failed (rc $rc; logs/calibrate.log)"
  exit 1
fi

for r in $RUNS; do run_one "$r"; done
enter none
log "all runs done in $SECONDS s"
