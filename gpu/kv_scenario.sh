#!/usr/bin/env bash
# Issue #24's multi-model scenario (bench/kv/multi_model.py: static KV splits against gpuos's elastic
# pools). Default: 6 GiB of KV, below the sum of the servers' peaks measured at 9 GiB on the H200
# (1.45 + 1.83 + 3.56 GiB, bench/results/2026-12-05-kv-h200-9gib), with a static split sized to those
# peaks among the static ones (the strongest split an operator who knew them could pick; ARGS='...
# --kv-total-gib 9 --splits equal,params,1:2:5' repeats the 9 GiB run). About 9 minutes: it runs detached
# (setsid outlives the call while the machine is held) and a second call, made at once, collects it.
#   OUT=/results bash gpu/kv_scenario.sh            # starts it, waits WAIT_S, collects if done
#   OUT=/results bash gpu/kv_scenario.sh collect    # waits for the run begun before, collects
# Settings: ARGS (multi_model.py flags; default: the calibration below), WAIT_S (540).
# Writes to $OUT: summary.json, summary.md, raw.json, work.tgz (every server's log and JSON).
# Needs ./build (or a carried .gpucarry, linked as build) and python3 with torch.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
# Each device call copies the working tree afresh and drops the untracked ./build link: the run
# begun by an earlier call would find no binaries for its next tenants. Linked again at once.
[[ ! -e build && -x .gpucarry/bin/gpuos ]] && ln -sfn .gpucarry build
RUN=/tmp/gpuos-kv-scenario WAIT_S=${WAIT_S:-540}
ARGS=${ARGS:---label kv --splits equal,1:2:5,1.45:1.83:3.56 --on-rates 4,1.8,1.6 --kv-total-gib 6 --duration 80 --period-s 40 --drain-s 20 --startup-s 20 --budget-s 900}

collect() {
  local t=0
  while [[ ! -e $RUN/done ]] && (( t < WAIT_S )); do sleep 1; t=$((t + 1)); done
  mkdir -p "$OUT"
  if [[ ! -e $RUN/done ]]; then
    tail -5 "$RUN/run.log"
    echo "still running after ${WAIT_S} s: call again with 'collect' (at once: the machine is given back when idle)"
    return 3
  fi
  cp "$RUN"/out/summary.json "$RUN"/out/summary.md "$RUN"/out/raw.json "$OUT"/ 2>/dev/null
  tar czf "$OUT/work.tgz" -C "$RUN" out/work run.log 2>/dev/null
  cat "$RUN/out/summary.md" 2>/dev/null || tail -20 "$RUN/run.log"
  return "$(cat "$RUN/done")"
}

if [[ ${1:-} == collect ]]; then collect; exit $?; fi

export LD_LIBRARY_PATH=$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONUNBUFFERED=1
rm -rf "$RUN" && mkdir -p "$RUN"
setsid bash -c "python3 bench/kv/multi_model.py $ARGS --out $RUN/out >$RUN/run.log 2>&1; echo \$? >$RUN/done" \
  </dev/null >/dev/null 2>&1 &
collect
