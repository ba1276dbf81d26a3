#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue #23's matrix at one load, every baseline side by side: exclusive, time-slicing, MPS, MPS with
# the best-effort client at priority 1 (25% / 50% threads), gpuos-time/space-priority, and the budget
# axis gpuos-time-slo-B / gpuos-space-slo-B. About 9-10 minutes at 15 s windows: longer than one
# device call may run (10 min), so it runs detached (setsid, which outlives the call while the machine
# is held) and a second call, made at once, collects it.
#   OUT=/results LOAD=0.5 bash gpu/slo_frontier.sh          # starts it, waits WAIT_S, collects if done
#   OUT=/results bash gpu/slo_frontier.sh collect           # waits for the run begun before, collects
#   LOAD=0.3 REPEATS=5 WINDOW=60 bash gpu/slo_frontier.sh dry-run   # the plan and its time, starts nothing
# Issue #40's method: REPEATS=5 WINDOW=60 (HP alone 5 times, interleaved among the modes, 60 s
# windows; each ratio then has a 95% interval and check_budgets.py --issue 40 judges a bound on its
# upper end). Every mode then takes ~90 s, not ~50: keep such a run to about 10 modes (e.g.
# BUDGETS="1.25 1.5" GPUOS_MODES=...), ~15-20 min by `dry-run`, within the 30 minutes a machine is
# held; the first call and each `collect` call wait up to WAIT_S (560 s) each.
# Settings: LOAD (0.5) BE (train | infer) BUDGETS ("1.05 1.1 1.25 1.5") WINDOW (15) WAIT_S (560)
#           REPEATS (1: HP alone once; run_matrix.py --exclusive-repeats) BUDGET_S (900, or 1700
#           with REPEATS > 1: modes whose estimate ends past it are skipped)
#           STEP_TO (a load, e.g. 0.7: the HP's load steps from LOAD to it half way: the load-step run)
#           MORE (extra run_matrix.py flags) BASE_MODES, GPUOS_MODES (the baselines' and gpuos's modes,
#           comma-separated, instead of the defaults above)
# Writes to $OUT: summary.md, summary.json, frontier.json, frontier.png, all.tgz (raw.json, plots,
# every gpuosd log). Needs ./build (or a carried .gpucarry, linked as build) and python3 with torch.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
source gpu/lib/detach.sh  # and links a carried build (use_carried_build)
RUN=/tmp/gpuos-slo-frontier WAIT_S=${WAIT_S:-560}

collect() {
  : "${OUT:?set OUT}"
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
LOAD=${LOAD:-0.5} BE=${BE:-train} WINDOW=${WINDOW:-15} REPEATS=${REPEATS:-1}
BUDGET_S=${BUDGET_S:-$( ((REPEATS > 1)) && echo 1700 || echo 900)}
gpuos_modes=gpuos-time-priority,gpuos-space-priority
for b in ${BUDGETS:-1.05 1.1 1.25 1.5}; do gpuos_modes+=,gpuos-time-slo-$b,gpuos-space-slo-$b; done
gpuos_modes=${GPUOS_MODES:-$gpuos_modes}
step=()
[[ -n ${STEP_TO:-} ]] && step=(--load-step-to "$STEP_TO")
# shellcheck disable=SC2206  # MORE: extra run_matrix.py flags, split as written
matrix=(python3 bench/colocation/run_matrix.py --load "$LOAD" --be "$BE" \
  --window "$WINDOW" --be-window 12 --budget-s "$BUDGET_S" --exclusive-repeats "$REPEATS" --label "slo-$LOAD" \
  --modes "${BASE_MODES:-exclusive-hp,exclusive-be,time-slicing,mps,mps-prio1-t25,mps-prio1-t50}" \
  --gpuos "$gpuos_modes" "${step[@]}" ${MORE:-})
if [[ ${1:-} == dry-run || ${1:-} == --dry-run ]]; then
  out=$("${matrix[@]}" --dry-run) || { echo "$out"; exit 2; }
  sed -n '1,/^$/p;/^mode /,/^$/p' <<<"$out"
  s=$(awk '/^total once built/ {print $4; f=1} /^total / && !f {t=$2} END {if (!f) print t}' <<<"$out")
  s=${s%.*}
  echo "device time ~${s} s ($((s / 60)) min): $(((s + WAIT_S - 1) / WAIT_S)) call(s) of up to ${WAIT_S} s" \
    "(the first starts it, each further one is 'collect')"
  ((s > 1700)) && echo "WARNING: longer than a machine is held (30 min): fewer modes (BUDGETS, GPUOS_MODES, BASE_MODES)"
  exit 0
fi
: "${OUT:?set OUT}"
detach_start "$RUN" "$RUN/matrix.log" "${matrix[@]}" --out "$RUN/out" --workdir "$RUN/work"
collect
