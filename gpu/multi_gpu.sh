#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue #27 on a 2-GPU machine (device kind nvidia-h200-x2), everything in one command:
#   1. the GPU suite (gpu/run_suite.sh) on each GPU: CUDA_VISIBLE_DEVICES=0, then =1;
#   2. the co-location matrix with a data-parallel BE: HP (hp_server.py) pinned to GPU 0 at LOAD of
#      its capacity, BE = be_train.py --ddp-gpus 0,1 (one process per GPU, NCCL; under gpuos each rank
#      its own best-effort tenant), modes exclusive-hp, exclusive-be, time-slicing,
#      gpuos-time-priority and (SLO=1) gpuos-time-slo-1.25.
# Device time, estimated: build 0 (carried .gpucarry) to ~5 min (cmake here, 3 targets); suites
# 2 x 1-3 min; the matrix ~5 min at 15 s windows (`bash gpu/multi_gpu.sh dry-run` prints its plan);
# ~10-18 min in all, cut at TOTAL_S (1320 s = 22 min: the matrix gets what is left as --budget-s).
# That is longer than one device call may run (10 min), so the run goes on detached (setsid, which
# outlives the call while the machine is held) and the same command, called again at once, collects:
#   OUT=/results bash gpu/multi_gpu.sh      # 1st call: checks, starts, waits WAIT_S (560), collects if done
#   OUT=/results bash gpu/multi_gpu.sh      # again at once while it says "still running" (exit 3)
#   bash gpu/multi_gpu.sh dry-run           # the GPU check and the plan, starts nothing
# A call on a fresh machine (no run under way in $RUN) starts one; FRESH=1 starts a new one anyway.
# Settings: LOAD (0.5) WINDOW (15) BE_WINDOW (12) SLO (1) SUITE (1: the two suites; 0: matrix only)
#           TOTAL_S (1320) WAIT_S (560) MORE (extra run_matrix.py flags) RUN (/tmp/gpuos-multi-gpu)
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
# NVSHMEM_DISABLE_NVLS=1 are exported here (and forced again in every DDP rank by be_train.py).
# Writes to $OUT (at most 8 files come back from a device call): machine.json,
# suite-gpu0/gpu_suite.json, suite-gpu1/gpu_suite.json, ddp/summary.json, ddp/summary.md, ddp/raw.json,
# all.tgz (everything: suite logs, the matrix's work dir with every process's log and JSON, plots).
# Needs: 2 GPUs (nvidia-smi); python3 with torch (CUDA, NCCL); ./build with bin/gpuos, bin/gpuosd,
# lib/libgpuos.so, else .gpucarry (bash scripts/gpu_carry.sh before the call) is linked as build,
# else it is built here (cmake, ninja, a C++20 compiler and the CUDA headers); nvcc for the suite.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
RUN=${RUN:-/tmp/gpuos-multi-gpu}
WAIT_S=${WAIT_S:-560} TOTAL_S=${TOTAL_S:-1320}
MATRIX_S=${MATRIX_S:-330}  # the matrix's estimate at the default windows (dry-run), cold start and margin included
LOAD=${LOAD:-0.5} WINDOW=${WINDOW:-15} BE_WINDOW=${BE_WINDOW:-12} SLO=${SLO:-1} SUITE=${SUITE:-1}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# NCCL's init lines in each rank's log (<mode>.be.log): the transport it chose between the GPUs.
export NCCL_DEBUG=${NCCL_DEBUG:-INFO}

source gpu/lib/detach.sh
log() { printf '[multi-gpu %s] %s\n' "$(date +%T)" "$*"; }

gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU '; }

gpuos_modes=gpuos-time-priority
[[ $SLO == 1 ]] && gpuos_modes+=,gpuos-time-slo-1.25
# The matrix's flags, less --budget-s, --out and --workdir (given when it starts).
matrix_args=(--be ddp --be-gpus "0,1" --hp-gpu 0 --load "$LOAD" --window "$WINDOW" --be-window "$BE_WINDOW"
             --modes "exclusive-hp,exclusive-be,time-slicing" --gpuos "$gpuos_modes" --label "ddp-$LOAD")
# shellcheck disable=SC2206
[[ -n ${MORE:-} ]] && matrix_args+=(${MORE})

check_gpus() {
  local n
  n=$(gpu_count)
  if ((n < 2)); then
    log "needs 2 GPUs; nvidia-smi shows ${n:-0}:"
    nvidia-smi -L 2>&1 | head -5
    return 2
  fi
  ((n > 2)) && log "nvidia-smi shows $n GPUs: this run uses GPUs 0 and 1"
  nvidia-smi -L
  return 0
}

# --- the run (detached) -----------------------------------------------------------------------------
RC=0  # the run's exit status: 0 when every step passed
body() {
  local t0
  t0=$(date +%s)
  mkdir -p "$RUN/out"
  log "machine"
  {
    nvidia-smi 2>&1
    nvidia-smi topo -m 2>&1
  } >"$RUN/nvidia-smi.txt"
  python3 - "$RUN/out/machine.json" <<'EOF' || RC=1
import json, os, subprocess, sys
m = {"env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                             "NVSHMEM_DISABLE_NVLS", "CUDA_VISIBLE_DEVICES")}}
r = subprocess.run(["nvidia-smi", "--query-gpu=index,name,uuid,driver_version,memory.total,pci.bus_id",
                    "--format=csv,noheader"], capture_output=True, text=True)
m["gpus"] = [[x.strip() for x in line.split(",")] for line in r.stdout.splitlines() if line.strip()]
m["gpu_count"] = len(m["gpus"])
try:
    import torch
    m["torch"] = torch.__version__
    m["torch_device_count"] = torch.cuda.device_count()
    v = torch.cuda.nccl.version()
    m["nccl_version"] = ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
    n = torch.cuda.device_count()
    m["peer_access"] = {f"{i}->{j}": torch.cuda.can_device_access_peer(i, j)
                        for i in range(n) for j in range(n) if i != j}
except Exception as e:  # noqa: BLE001 - recorded, the run goes on
    m["torch_error"] = f"{type(e).__name__}: {e}"
json.dump(m, open(sys.argv[1], "w"), indent=1)
print(json.dumps(m))
EOF

  if [[ ! -x build/bin/gpuos || ! -e build/lib/libgpuos.so ]]; then
    if [[ -x .gpucarry/bin/gpuos && ! -e build ]]; then
      log "build: linking the carried .gpucarry as ./build"
      ln -sfn .gpucarry build
    else
      log "build: cmake (Release; gpuos, gpuosd, libgpuos.so)"
      if ! { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUOS_BUILD_TESTS=OFF \
               -DGPUOS_BUILD_BENCH=OFF && cmake --build build --target gpuos_cli gpuosd gpuos; } \
             >"$RUN/build.log" 2>&1; then
        log "build failed (build.log); the gpuos modes will be skipped"
        tail -20 "$RUN/build.log"
        RC=1
      fi
    fi
  fi
  export LD_LIBRARY_PATH=$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

  if [[ $SUITE == 1 ]]; then
    for g in 0 1; do
      # A suite takes 1-3 min (4 at most); MATRIX_S are kept for the matrix.
      local limit=$((TOTAL_S - ($(date +%s) - t0) - MATRIX_S))
      ((limit > 420)) && limit=420
      if ((limit < 120)); then
        log "suite on GPU $g not begun: too little of TOTAL_S left, kept for the matrix"
        RC=1
        continue
      fi
      log "GPU suite on GPU $g (at most $limit s)"
      CUDA_VISIBLE_DEVICES=$g OUT=$RUN/out/suite-gpu$g timeout -k 10 "$limit" bash gpu/run_suite.sh \
        >"$RUN/suite-gpu$g.log" 2>&1 || { RC=1; log "suite on GPU $g failed"; }
      tail -12 "$RUN/suite-gpu$g.log"
    done
  fi

  local budget=$((TOTAL_S - ($(date +%s) - t0) - 30))
  log "co-location matrix, DDP BE over GPUs 0,1, HP on GPU 0 (--budget-s $budget)"
  timeout -k 30 $((budget + 120)) python3 bench/colocation/run_matrix.py "${matrix_args[@]}" \
    --budget-s "$budget" --out "$RUN/out/ddp" --workdir "$RUN/ddp-work" >"$RUN/matrix.log" 2>&1 || RC=1
  tail -30 "$RUN/matrix.log"
  # Every mode must have run: a mode in error or skipped (time budget, no build) fails the run.
  python3 - "$RUN/out/ddp/summary.json" <<'EOF' || RC=1
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"no matrix summary: {e}")
bad = [f"{r['mode']}: {r['status']} {r.get('error') or ''}" for r in s["modes"] if r["status"] != "ok"]
print(f"matrix: gpu {s.get('gpu')}, gpu_count {s.get('gpu_count')}, NCCL {s.get('nccl_version')}, "
      f"BE ranks {s.get('be_world_size')}; {len(s['modes']) - len(bad)} of {len(s['modes'])} modes ok")
sys.exit("\n".join(bad) or None)
EOF
  log "done in $(($(date +%s) - t0)) s, rc $RC"
}

# --- collecting ----------------------------------------------------------------------------------------
collect() {
  : "${OUT:?set OUT}"
  detach_wait "$RUN" "$WAIT_S" "$RUN/run.log" \
    "call the same command again at once (the machine goes back when idle)"
  local rc=$?
  mkdir -p "$OUT"
  ((rc == 0)) || return "$rc"
  mkdir -p "$OUT/suite-gpu0" "$OUT/suite-gpu1" "$OUT/ddp"
  cp "$RUN/out/machine.json" "$OUT/" 2>/dev/null
  for g in 0 1; do cp "$RUN/out/suite-gpu$g/gpu_suite.json" "$OUT/suite-gpu$g/" 2>/dev/null; done
  cp "$RUN"/out/ddp/summary.json "$RUN"/out/ddp/summary.md "$RUN"/out/ddp/raw.json "$OUT/ddp/" 2>/dev/null
  find "$RUN" \( -type s -o -type p \) -delete 2>/dev/null  # MPS pipes, sockets: they do not travel
  tar czf "$OUT/all.tgz" -C "$RUN" --exclude=./done . 2>/dev/null
  cat "$RUN/out/suite-gpu0/gpu_suite.md" "$RUN/out/suite-gpu1/gpu_suite.md" "$RUN/out/ddp/summary.md" 2>/dev/null \
    || tail -30 "$RUN/run.log"
  detach_status "$RUN"
}

case ${1:-} in
  _body)
    body
    exit "$RC"
    ;;
  dry-run)
    check_gpus || exit $?
    [[ $SUITE == 1 ]] && for g in 0 1; do
      echo "suite: CUDA_VISIBLE_DEVICES=$g OUT=$RUN/out/suite-gpu$g bash gpu/run_suite.sh"
    done
    python3 bench/colocation/run_matrix.py "${matrix_args[@]}" --budget-s "$TOTAL_S" \
      --out "$RUN/out/ddp" --workdir "$RUN/ddp-work" --dry-run
    exit
    ;;
  "") ;;
  *)
    echo "usage: OUT=dir bash gpu/multi_gpu.sh [dry-run]" >&2
    exit 2
    ;;
esac

: "${OUT:?set OUT}"
if [[ -z ${FRESH:-} ]] && detach_started "$RUN"; then
  log "a run is under way or done in $RUN (started $(cat "$RUN/started")): collecting"
  collect
  exit $?
fi
check_gpus || { mkdir -p "$OUT" && nvidia-smi -L >"$OUT/nvidia-smi.txt" 2>&1; exit 2; }
detach_start "$RUN" "$RUN/run.log" bash "$PWD/gpu/multi_gpu.sh" _body
log "started (log $RUN/run.log); waiting up to ${WAIT_S} s"
collect
