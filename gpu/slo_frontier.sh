#!/usr/bin/env bash
# Issue #23's matrix at one load, every baseline side by side: exclusive, time-slicing, MPS, MPS with
# the best-effort client at priority 1 (25% / 50% threads), gpuos-time/space-priority, and the budget
# axis gpuos-time-slo-B / gpuos-space-slo-B. About 9-10 minutes at 15 s windows: longer than one
# device call may run (10 min), so it runs detached (setsid, which outlives the call while the machine
# is held) and a second call, made at once, collects it.
#   OUT=/results LOAD=0.5 bash gpu/slo_frontier.sh          # starts it, waits WAIT_S, collects if done
#   OUT=/results bash gpu/slo_frontier.sh collect           # waits for the run begun before, collects
# Settings: LOAD (0.5) BE (train | infer) BUDGETS ("1.05 1.1 1.25 1.5") WINDOW (15) WAIT_S (560)
#           STEP_TO (a load, e.g. 0.7: the HP's load steps from LOAD to it half way: the load-step run)
#           MORE (extra run_matrix.py flags) BASE_MODES, GPUOS_MODES (the baselines' and gpuos's modes,
#           comma-separated, instead of the defaults above)
# Writes to $OUT: summary.md, summary.json, frontier.json, frontier.png, all.tgz (raw.json, plots,
# every gpuosd log). Needs ./build (or a carried .gpucarry, linked as build) and python3 with torch.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
source gpu/lib/detach.sh  # and links a carried build (use_carried_build)
RUN=/tmp/gpuos-slo-frontier WAIT_S=${WAIT_S:-560}

collect() {
  mkdir -p "$OUT"
  detach_wait "$RUN" "$WAIT_S" "$RUN/matrix.log" \
    "call again with 'collect' (at once: the machine is given back when idle)" || return 3
  cp "$RUN"/out/summary.md "$RUN"/out/summary.json "$RUN"/out/frontier.* "$OUT"/ 2>/dev/null
  tar czf "$OUT/all.tgz" -C "$RUN" out work matrix.log 2>/dev/null
  cat "$RUN/out/summary.md" 2>/dev/null || tail -20 "$RUN/matrix.log"
  detach_status "$RUN"
}

if [[ ${1:-} == collect ]]; then collect; exit $?; fi

export PYTHONUNBUFFERED=1
LOAD=${LOAD:-0.5} BE=${BE:-train} WINDOW=${WINDOW:-15}
gpuos_modes=gpuos-time-priority,gpuos-space-priority
for b in ${BUDGETS:-1.05 1.1 1.25 1.5}; do gpuos_modes+=,gpuos-time-slo-$b,gpuos-space-slo-$b; done
gpuos_modes=${GPUOS_MODES:-$gpuos_modes}
step=()
[[ -n ${STEP_TO:-} ]] && step=(--load-step-to "$STEP_TO")
# shellcheck disable=SC2086  # MORE: extra run_matrix.py flags, split as written
detach_start "$RUN" "$RUN/matrix.log" python3 bench/colocation/run_matrix.py --load "$LOAD" --be "$BE" \
  --window "$WINDOW" --be-window 12 --budget-s 900 --label "slo-$LOAD" \
  --modes "${BASE_MODES:-exclusive-hp,exclusive-be,time-slicing,mps,mps-prio1-t25,mps-prio1-t50}" \
  --gpuos "$gpuos_modes" "${step[@]}" ${MORE:-} --out "$RUN/out" --workdir "$RUN/work"
collect
