#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# MPS's own cost to a graph-replayed decode step (issue #23), kernel by kernel.
# Runs gpu/tests/mps_cost.py (the suite's 8B Llama-shaped decode, batch 8, one CUDA graph per step:
# timed replays, a CUPTI profile of replays, a microbenchmark of tiny kernels in a graph) once per
# variant: without MPS, as the client of a private MPS control daemon, and as one with each
# tenant-side setting; then gpu/mps_cost_report.py compares them.
#
#   OUT=/results bash gpu/mps_cost.sh        (repo root; python3 with CUDA torch, nvidia-cuda-mps-control)
#   bash gpu/mps_cost.sh dry-run             (prints the plan, runs nothing)
#
# Presence variants (issue #40: what a co-runner on a few SMs costs the step, and why):
#   mps-atp<N>         the step's own client limited to N% of the threads (confinement alone)
#   be-<kind>-t<N>     beside a best-effort companion, an MPS client at priority 1 with N% of the
#                      threads, started before the timed part and stopped after the run: kind alu,
#                      alufull or mem (gpu/tests/presence_be.cu: FMAs leaving room on its SMs, FMAs
#                      filling them, memory streaming) or train (bench/colocation/be_train.py)
#   VARIANTS="no-mps mps mps-atp90 be-alu-t10 be-alufull-t10 be-mem-t10 be-train-t10 no-mps-again"
#   PARAMS_B=1 BATCH=8 bash gpu/mps_cost.sh   (the suite's 1B server at about 30% load: ~4 min)
#
# Writes only three files to $OUT (a device call brings back few): mps_cost.md, mps_cost.json and
# mps_cost_runs.tgz (each run's JSON and log, the MPS logs). About 25 s a run, 8 runs: ~3.5-4 min.
# Settings: VARIANTS="no-mps mps ..." (names in variant_env below), STEPS=400, PROFILE_STEPS=50,
#   PARAMS_B=8, BATCH=8, TIME_S=320 (no run begins past this many seconds whose last run's length
#   would overrun it), RUN_TIMEOUT=150, PYTHON=python3, RUNNER (default "$PYTHON
#   gpu/tests/mps_cost.py"), MPS_CONTROL=nvidia-cuda-mps-control.
# Changes no GPU setting. The private MPS control daemon (pipe and log directories under
# ${TMPDIR:-/tmp}: keep it short, the pipe is a socket path) is quit on every way out, and its
# processes killed if they outlive the quit.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

PY=${PYTHON:-python3}
RUNNER=${RUNNER:-$PY gpu/tests/mps_cost.py}
MPS_CONTROL=${MPS_CONTROL:-nvidia-cuda-mps-control}
VARIANTS=${VARIANTS:-no-mps mps mps-atp100 mps-conn1 mps-conn32 mps-prio0 no-mps-conn1 no-mps-again}
STEPS=${STEPS:-400}
PROFILE_STEPS=${PROFILE_STEPS:-50}
PARAMS_B=${PARAMS_B:-8}
BATCH=${BATCH:-8}
TIME_S=${TIME_S:-320}
QUIT_WAIT_S=${QUIT_WAIT_S:-15}   # after "quit", how long our MPS processes may take to go before kill -9
RUN_TIMEOUT=${RUN_TIMEOUT:-150}
# Every variable a variant may set; each run starts with all of them unset.
CLEAR=(-u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_LOG_DIRECTORY -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
       -u CUDA_MPS_CLIENT_PRIORITY -u CUDA_DEVICE_MAX_CONNECTIONS)
PRESENCE_BE=${PRESENCE_BE:-build/bin/presence_be}   # gpu/tests/presence_be.cu (scripts/gpu_carry.sh builds it)
COMPANION_READY_S=${COMPANION_READY_S:-120}          # the trainer builds its model first

pct_of() { [[ $1 =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= 100)); }

# companion_of NAME: prints "KIND PCT" for a be-<kind>-t<pct> variant; fails for any other name.
companion_of() {
  [[ $1 =~ ^be-(alu|alufull|mem|train)-t([0-9]+)$ ]] || return 1
  local kind=${BASH_REMATCH[1]} pct=${BASH_REMATCH[2]}
  pct_of "$pct" && echo "$kind $pct"
}

# variant_env NAME: prints "MPS VAR=VALUE..." (MPS 1: a client of the private daemon); fails for an
# unknown name.
variant_env() {
  case $1 in
    no-mps | no-mps-again) echo 0 ;;
    no-mps-conn1) echo 0 CUDA_DEVICE_MAX_CONNECTIONS=1 ;;
    no-mps-conn32) echo 0 CUDA_DEVICE_MAX_CONNECTIONS=32 ;;
    mps | mps-again) echo 1 ;;
    mps-atp100) echo 1 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 ;;
    mps-conn1) echo 1 CUDA_DEVICE_MAX_CONNECTIONS=1 ;;
    mps-conn32) echo 1 CUDA_DEVICE_MAX_CONNECTIONS=32 ;;
    mps-prio0) echo 1 CUDA_MPS_CLIENT_PRIORITY=0 ;;
    mps-atp[0-9]*) pct_of "${1#mps-atp}" && echo 1 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${1#mps-atp}" ;;
    be-*) companion_of "$1" >/dev/null && echo 1 ;;
    *) return 1 ;;
  esac
}

for v in $VARIANTS; do
  variant_env "$v" >/dev/null || { echo "mps_cost.sh: unknown variant $v" >&2; exit 2; }
done
if [[ ${1:-} == dry-run ]]; then
  for v in $VARIANTS; do
    read -r mps vars <<<"$(variant_env "$v")"
    echo "$v: $([[ $mps == 1 ]] && echo "MPS client" || echo "no MPS") ${vars:-(no setting)}" \
      "$(companion_of "$v" | awk '{print "beside a " $1 " companion at priority 1, " $2 "% of the threads"}')"
  done
  echo "each: $RUNNER --variant NAME --steps $STEPS --profile-steps $PROFILE_STEPS --params-b $PARAMS_B --batch $BATCH"
  exit 0
fi

: "${OUT:?set OUT}"
mkdir -p "$OUT" || exit 2
W=$(mktemp -d "${TMPDIR:-/tmp}/gpuos-mpscost-XXXX") || exit 2
RUNS=$W/runs
LOGS=$W/logs
MPS_PIPE=$W/mps-pipe
MPS_LOG=$W/mps-log
MPS_ON=0
MPS_FAILED=0   # the daemon did not come up: the remaining MPS variants are not run (they would run without MPS)
mkdir -p "$RUNS" "$LOGS"
log() { echo "[mps_cost $(date +%T)] $*" | tee -a "$LOGS/run.log"; }

# PIDs of our MPS daemon and server: comm "nvidia-cuda-mps" with our pipe directory in the environment.
mps_pids() {
  local p c
  for p in /proc/[0-9]*; do
    read -r c 2>/dev/null <"$p/comm" || continue   # a builtin: no fork per process
    [[ $c == nvidia-cuda-mps* ]] || continue
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "CUDA_MPS_PIPE_DIRECTORY=$MPS_PIPE" && printf '%s ' "${p#/proc/}"
  done
}

start_mps() {
  mkdir -p "$MPS_PIPE" "$MPS_LOG"
  MPS_ON=1   # from here on, quit it on the way out, even after a failed start
  CUDA_MPS_PIPE_DIRECTORY=$MPS_PIPE CUDA_MPS_LOG_DIRECTORY=$MPS_LOG timeout 20 "$MPS_CONTROL" -d \
    >"$LOGS/mps-start.out" 2>&1 </dev/null
  local rc=$? _
  if ((rc != 0)); then log "MPS control daemon did not start (rc $rc)"; return 1; fi
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
  for _ in $(seq $((QUIT_WAIT_S * 10))); do
    left=$(mps_pids)
    [[ -z $left ]] && break
    sleep 0.1
  done
  if [[ -n $left ]]; then
    log "MPS processes $left outlived quit: killed"
    kill -9 $left 2>/dev/null
  fi
  cp "$MPS_LOG"/*.log "$LOGS/" 2>/dev/null
  log "MPS control daemon stopped"
  sleep 0.5   # let the server release the GPU before the next run
}

cleanup() {
  stop_companion
  stop_mps
  rm -rf "$MPS_PIPE"   # sockets: nothing to keep
  if [[ -d $RUNS ]]; then
    tar czf "$OUT/mps_cost_runs.tgz" -C "$W" runs logs 2>/dev/null
    rm -rf "$W"
  fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

COMPANION_PID=
# start_companion VARIANT: the variant's best-effort companion, an MPS client at priority 1 with its
# share of the threads, running once its ready file appears. Fails if it does not get there.
start_companion() {
  local kind pct ready=$W/$1.ready _
  read -r kind pct <<<"$(companion_of "$1")"
  local cmd=("$PRESENCE_BE" --mode "$kind" --json "$RUNS/$1.be.json" --ready-file "$ready")
  [[ $kind == train ]] && cmd=("$PY" bench/colocation/be_train.py --json "$RUNS/$1.be.json" --ready-file "$ready")
  env "${CLEAR[@]}" CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" CUDA_MPS_LOG_DIRECTORY="$MPS_LOG" \
    CUDA_MPS_CLIENT_PRIORITY=1 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$pct" "${cmd[@]}" >"$LOGS/$1.be.log" 2>&1 &
  COMPANION_PID=$!
  for _ in $(seq $((COMPANION_READY_S * 10))); do
    [[ -e $ready ]] && { log "$1: companion $kind at ${pct}% of the threads running (pid $COMPANION_PID)"; return 0; }
    kill -0 "$COMPANION_PID" 2>/dev/null || break
    sleep 0.1
  done
  log "$1: the companion did not get ready (see logs/$1.be.log)"
  stop_companion
  return 1
}

stop_companion() {
  [[ -n $COMPANION_PID ]] || return 0
  kill -TERM "$COMPANION_PID" 2>/dev/null
  local _
  for _ in $(seq 150); do kill -0 "$COMPANION_PID" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$COMPANION_PID" 2>/dev/null
  wait "$COMPANION_PID" 2>/dev/null
  COMPANION_PID=
}

# attach_companion VARIANT: the companion's own record (its rate) into the variant's JSON.
attach_companion() {
  "$PY" - "$RUNS/$1.json" "$RUNS/$1.be.json" "$(companion_of "$1")" <<'EOF2'
import json, sys
run_path, be_path, (kind, pct) = sys.argv[1], sys.argv[2], sys.argv[3].split()
try:
    be = json.load(open(be_path))
except (OSError, ValueError) as e:
    be = {"error": f"no companion record: {e}"}
be.pop("samples", None)  # the trainer's progress log: its rate after warm-up is rate_since_ready
be.update(kind=kind, threads_pct=int(pct))
run = json.load(open(run_path))
run["companion"] = be
json.dump(run, open(run_path, "w"), indent=1)
EOF2
}

stub() {  # stub NAME REASON: a result for a run that left none
  printf '{"variant": "%s", "ok": false, "error": "%s"}\n' "$1" "$2" >"$RUNS/$1.json"
}

foreign=$(for p in /proc/[0-9]*; do
  read -r c 2>/dev/null <"$p/comm" && [[ $c == nvidia-cuda-mps* ]] && printf '%s ' "${p#/proc/}"
done)
[[ -n $foreign ]] && log "note: MPS processes not ours are running (pids $foreign); each run records whether it joined one"
nvidia-smi --query-gpu=name,driver_version,compute_mode,clocks.sm,clocks.max.sm,persistence_mode \
  --format=csv >"$LOGS/nvidia-smi.csv" 2>&1

last_s=30
for v in $VARIANTS; do
  read -r mps vars <<<"$(variant_env "$v")"
  if ((SECONDS + last_s > TIME_S)); then
    log "$v: skipped ($SECONDS s gone, the last run took $last_s s, limit $TIME_S s)"
    stub "$v" "skipped: time limit"
    continue
  fi
  extra=()
  if [[ $mps == 1 ]]; then
    if ((MPS_FAILED)) || { ((!MPS_ON)) && ! start_mps; }; then
      MPS_FAILED=1
      stub "$v" "the MPS control daemon did not start (see logs/mps-start.out)"
      continue
    fi
    extra=(CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" CUDA_MPS_LOG_DIRECTORY="$MPS_LOG")
  else
    stop_mps
  fi
  read -ra setting <<<"${vars:-}"
  log "$v: $([[ $mps == 1 ]] && echo "MPS client" || echo "no MPS") ${vars:-}"
  t0=$SECONDS
  if companion_of "$v" >/dev/null && ! start_companion "$v"; then
    stub "$v" "its companion did not get ready (see logs/$v.be.log)"
    continue
  fi
  # shellcheck disable=SC2086  # RUNNER is a command line
  env "${CLEAR[@]}" "${extra[@]}" "${setting[@]}" timeout -k 10 "$RUN_TIMEOUT" $RUNNER --variant "$v" \
    --json "$RUNS/$v.json" --steps "$STEPS" --profile-steps "$PROFILE_STEPS" --params-b "$PARAMS_B" \
    --batch "$BATCH" >"$LOGS/$v.log" 2>&1
  rc=$?
  if companion_of "$v" >/dev/null; then
    stop_companion
    [[ -s $RUNS/$v.json ]] && attach_companion "$v"
  fi
  last_s=$((SECONDS - t0))
  ((last_s < 10)) && last_s=10
  log "$v: rc $rc, $((SECONDS - t0)) s"
  [[ -s $RUNS/$v.json ]] || stub "$v" "no result (rc $rc; see logs/$v.log)"
done
stop_mps

files=()
for v in $VARIANTS; do [[ -e $RUNS/$v.json ]] && files+=("$RUNS/$v.json"); done
"$PY" gpu/mps_cost_report.py --out "$OUT" "${files[@]}" >"$LOGS/report.out" 2>&1
rc=$?
if ((rc != 0)) || [[ ! -s $OUT/mps_cost.md ]]; then
  log "report failed (rc $rc)"
  cat "$LOGS/report.out"
  exit 1
fi
cat "$OUT/mps_cost.md"
log "done in $SECONDS s: $OUT/mps_cost.md, $OUT/mps_cost.json, $OUT/mps_cost_runs.tgz"
# Exit 0 when the baseline and the plain MPS run (those of them in VARIANTS) both ran.
"$PY" - "$OUT/mps_cost.json" $VARIANTS <<'EOF2'
import json, sys
rows = {r["variant"]: r for r in json.load(open(sys.argv[1]))["runs"]}
need = [v for v in ("no-mps", "mps") if v in sys.argv[2:]]
sys.exit(0 if all(rows.get(v, {}).get("ok") for v in need) else 1)
EOF2
