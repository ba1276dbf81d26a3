#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU suite: proves on a real GPU (the H200) that gpuos governs real programs.
#
#   OUT=/some/dir bash gpu/run_suite.sh        (from the repository root; see gpu/README.md)
#
# Needs a built tree at ./build (override: GPUOS_BUILD_DIR): build/bin/gpuos, build/bin/gpuosd,
# build/lib/libgpuos.so; nvcc; python3 with torch (CUDA) and triton (override: PYTHON).
# Starts a private gpuosd, runs every test under `gpuos run --class best-effort`, compares what each
# test issued with what the daemon counted, writes $OUT/gpu_suite.json and $OUT/gpu_suite.md (logs
# under $OUT/logs/), prints the table last and exits non-zero if any test failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$(pwd)
if [[ -z ${OUT:-} ]]; then
  echo "run_suite.sh: set OUT to the results directory" >&2
  exit 2
fi
mkdir -p "$OUT/logs" || exit 2
OUT=$(cd "$OUT" && pwd)

BUILD=${GPUOS_BUILD_DIR:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
PY=${PYTHON:-python3}
NVCC=${NVCC:-nvcc}
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
GPUOS=$BUILD/bin/gpuos
WORK=/tmp/gpuos-suite
LOGS=$OUT/logs

export GPUOS_SOCKET=$WORK/gpuosd.sock
export GPUOS_CLI=$GPUOS
export PYTHONDONTWRITEBYTECODE=1
unset LD_PRELOAD

log() { printf '[suite %s] %s\n' "$(date +%T)" "$*"; }

suite_start=$(date +%s)
rm -rf "$WORK"
mkdir -p "$WORK/bin" "$WORK/results" "$WORK/reg" || exit 2
: >"$WORK/runs.tsv"

# --- 0. the machine ---------------------------------------------------------------------------------
GPU_NAME=unknown
DRIVER=unknown
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi 2>&1 | tee "$LOGS/nvidia-smi.txt" | head -20
  # The GPU the tests see: under CUDA_VISIBLE_DEVICES (gpu/multi_gpu.sh runs the suite on each GPU)
  # its first entry, an index or a UUID as nvidia-smi -i takes them.
  sel=()
  [[ -n ${CUDA_VISIBLE_DEVICES:-} ]] && sel=(-i "${CUDA_VISIBLE_DEVICES%%,*}")
  q=$(nvidia-smi "${sel[@]}" --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
  if [[ -n $q ]]; then
    GPU_NAME=${q%%,*}
    DRIVER=${q##*, }
  fi
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,utilization.gpu,compute_mode,mig.mode.current \
    --format=csv 2>&1 | tee -a "$LOGS/nvidia-smi.txt"
else
  log "nvidia-smi not found"
fi
log "GPU: $GPU_NAME, driver $DRIVER, CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
for f in "$GPUOS" "$BUILD/bin/gpuosd" "$BUILD/lib/libgpuos.so"; do
  [[ -e $f ]] || log "MISSING: $f (the build tree must be carried to ./build)"
done

# --- 1. build the CUDA C++ test (twice: legacy and per-thread default stream) -------------------------
build_ok=1
log "building gpu/tests/cuda_api.cu with $NVCC"
if ! "$NVCC" -O2 -arch=sm_90 -o "$WORK/bin/cuda_api" gpu/tests/cuda_api.cu -lcuda \
  >"$LOGS/build_cuda_api.log" 2>&1; then
  build_ok=0
  log "build of cuda_api failed (see $LOGS/build_cuda_api.log)"
fi
if ! "$NVCC" -O2 -arch=sm_90 --default-stream per-thread -o "$WORK/bin/cuda_api_ptsz" gpu/tests/cuda_api.cu \
  -lcuda >"$LOGS/build_cuda_api_ptsz.log" 2>&1; then
  build_ok=0
  log "build of cuda_api_ptsz failed (see $LOGS/build_cuda_api_ptsz.log)"
fi

# --- 2. the daemon --------------------------------------------------------------------------------------
source gpu/lib/gpuosd.sh
stop_daemon() {
  # Writes $WORK/daemon_status.json; what gpuosd listed last, while it still runs.
  [[ -n $GPUOSD_PID ]] || return 0
  gpuosd_alive && "$GPUOS" ps --all --json >"$LOGS/ps_all_final.json" 2>/dev/null
  gpuosd_stop 5 "$WORK/daemon_status.json"
}
trap stop_daemon EXIT
trap 'log "interrupted"; exit 130' INT TERM

log "starting gpuosd: $GPUOS daemon --socket $GPUOS_SOCKET"
gpuosd_start "$GPUOS" "$GPUOS_SOCKET" "$LOGS/daemon.log" "$GPUOS" daemon --socket "$GPUOS_SOCKET"
if gpuosd_wait 20; then
  log "gpuosd is up (pid $GPUOSD_PID)"
  "$GPUOS" ps 2>&1 | head -5
else
  log "gpuosd did not answer (see $LOGS/daemon.log); the tests will run and fail"
  tail -5 "$LOGS/daemon.log"
fi

# --- 3. the tests ---------------------------------------------------------------------------------------
# run_test NAME TIMEOUT_S CMD... : runs CMD RESULT_PATH as tenant NAME, then checks the daemon saw it
# register and exit.
run_test() {
  local name=$1 limit=$2
  shift 2
  local result=$WORK/results/$name.json
  rm -f "$result"
  log "test $name: $*"
  local t0 rc
  t0=$(date +%s.%N)
  timeout -k 10 "$limit" "$GPUOS" run --name "$name" --class best-effort -- "$@" "$result" \
    >"$LOGS/$name.out" 2>"$LOGS/$name.err" </dev/null
  rc=$?
  local secs
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  # A test that died before writing its file may still have printed its line.
  if [[ ! -s $result ]]; then
    grep '^{' "$LOGS/$name.out" | tail -1 >"$result"
  fi
  "$PY" gpu/tests/gpuos_counters.py wait-exited "$name" "$result" >"$WORK/reg/$name.json" 2>>"$LOGS/$name.err"
  printf '%s\t%s\t%s\n' "$name" "$rc" "$secs" >>"$WORK/runs.tsv"
  log "test $name: exit $rc in ${secs}s; $(head -c 300 "$result")"
  if [[ $rc -ne 0 ]]; then tail -5 "$LOGS/$name.err"; fi
}

if [[ $build_ok -eq 1 ]]; then
  run_test cuda_api 90 "$WORK/bin/cuda_api"
  run_test cuda_api_ptsz 90 "$WORK/bin/cuda_api_ptsz"
else
  for n in cuda_api cuda_api_ptsz; do
    printf '{"name":"%s","passed":false,"error":"nvcc build failed, see logs/build_%s.log"}\n' "$n" "$n" \
      >"$WORK/results/$n.json"
    printf '%s\t%s\t%s\n' "$n" "-1" "0" >>"$WORK/runs.tsv"
  done
fi
run_test torch_eager 150 "$PY" gpu/tests/torch_eager.py
run_test torch_graphs 150 "$PY" gpu/tests/torch_graphs.py
run_test triton_kernel 180 "$PY" gpu/tests/triton_kernel.py

# --- 4. stop the daemon, report ------------------------------------------------------------------------
stop_daemon
mkdir -p "$LOGS/results" "$LOGS/registration"
cp "$WORK"/results/*.json "$LOGS/results/" 2>/dev/null
cp "$WORK"/reg/*.json "$LOGS/registration/" 2>/dev/null
cp "$WORK/runs.tsv" "$WORK/daemon_status.json" "$LOGS/" 2>/dev/null
log "suite took $(($(date +%s) - suite_start))s"
"$PY" gpu/suite_report.py --work "$WORK" --out "$OUT" --gpu "$GPU_NAME" --driver "$DRIVER"
exit $?
