#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
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
source gpu/lib/detach.sh  # and links a carried build (use_carried_build)
RUN=/tmp/gpuos-kv-scenario WAIT_S=${WAIT_S:-540}
ARGS=${ARGS:---label kv --splits equal,1:2:5,1.45:1.83:3.56 --on-rates 4,1.8,1.6 --kv-total-gib 6 --duration 80 --period-s 40 --drain-s 20 --startup-s 20 --budget-s 900}

collect() {
  mkdir -p "$OUT"
  detach_wait "$RUN" "$WAIT_S" "$RUN/run.log" \
    "call again with 'collect' (at once: the machine is given back when idle)" || return 3
  cp "$RUN"/out/summary.json "$RUN"/out/summary.md "$RUN"/out/raw.json "$OUT"/ 2>/dev/null
  tar czf "$OUT/work.tgz" -C "$RUN" out/work run.log 2>/dev/null
  cat "$RUN/out/summary.md" 2>/dev/null || tail -20 "$RUN/run.log"
  detach_status "$RUN"
}

if [[ ${1:-} == collect ]]; then collect; exit $?; fi

export PYTHONUNBUFFERED=1
# shellcheck disable=SC2086  # ARGS: multi_model.py's flags, split as written
detach_start "$RUN" "$RUN/run.log" python3 bench/kv/multi_model.py $ARGS --out "$RUN/out"
collect
