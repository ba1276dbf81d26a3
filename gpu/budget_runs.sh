#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue #40's co-location runs, one after another, each a run_matrix.py matrix with its baselines,
# and everything (summaries, raw results, gpuosd logs) in one $OUT/runs.tgz (a device call returns
# only a few files; a call that ends before the runs do returns those that ended, in
# runs-partial.tgz). RUNS: ';'-separated run_matrix.py argument lists, each with its own --label;
# every run gets --be-window 12 --budget-s BUDGET_S --exclusive-repeats REPEATS. A gpuos mode
# without @variant runs gpuosd's defaults (since 01e3ba0 a budget in a domain: the server on the
# whole GPU, the interval meter).
# Every run names exclusive-hp and exclusive-be among its --modes (else it is refused; PARTIAL=1).
# Settings: WINDOW (15) REPEATS (1: HP alone once) BUDGET_S (per run: 900, or 1700 with REPEATS > 1)
#           WAIT_S (560) RUN (/tmp/gpuos-budget-runs)
# Issue #40's method: REPEATS=5 WINDOW=60 (HP alone 5 times, interleaved among the modes, 60 s
# windows; check_budgets.py --issue 40 then judges each bound on its 95% interval's upper end).
# Such a run takes about 2.5x as long per mode as at the defaults: `bash gpu/budget_runs.sh dry-run`
# prints each run's plan and estimate (run_matrix.py --dry-run) and their sum, starting nothing.
# A run longer than one device call (10 min) goes on detached (setsid, gpu/lib/detach.sh: it outlives
# the call while the machine is held, at most 30 min) and a second call, made at once, collects it:
#   OUT=/results RUNS='--load 0.3 --label a; ...' bash gpu/budget_runs.sh   # starts, waits WAIT_S, collects if done
#   OUT=/results bash gpu/budget_runs.sh collect                            # waits for the run begun before, collects
# Needs ./build (or a carried .gpucarry) and python3 with torch.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
source gpu/lib/detach.sh  # and links a carried build (use_carried_build)
export PYTHONUNBUFFERED=1
RUN=${RUN:-/tmp/gpuos-budget-runs} WAIT_S=${WAIT_S:-560}
REPEATS=${REPEATS:-1} WINDOW=${WINDOW:-15}
BUDGET_S=${BUDGET_S:-$( ((REPEATS > 1)) && echo 1700 || echo 900)}
work=$RUN/work

# The i-th run's run_matrix.py arguments (word-split as written), less --out and --workdir. The
# settings come first, so a run that names its own (--window 60 --exclusive-repeats 5 --budget-s
# 1700: #40's method) overrides them, and one call can hold point checks and a run by the method.
run_args() {
  local args=$1
  echo "--window $WINDOW --be-window 12 --budget-s $BUDGET_S --exclusive-repeats $REPEATS $args"
}

all_runs() {
  local rc=0 i
  mkdir -p "$work"
  for i in "${!runs[@]}"; do
    # shellcheck disable=SC2046  # the run's arguments, split as written
    python3 bench/colocation/run_matrix.py $(run_args "${runs[$i]}") \
      --out "$work/run-$i" --workdir "$work/work-$i" >"$work/run-$i.log" 2>&1 || rc=1
    cat "$work/run-$i/summary.md" 2>/dev/null || tail -20 "$work/run-$i.log"
  done
  return $rc
}

# Every run measures HP alone and BE alone (#40's checks divide by both): a run without either
# leaves its modes without that ratio (stop 50 lost a 50% load run's BE ratios that way). PARTIAL=1
# runs such a run anyway.
check_baselines() {
  local i modes bad=0
  [[ ${PARTIAL:-0} == 1 ]] && return 0
  for i in "${!runs[@]}"; do
    modes=$(sed -nE 's/.*--modes[ =]([^ ]+).*/\1/p' <<<"${runs[$i]}")
    for m in exclusive-hp exclusive-be; do
      if [[ ",$modes," != *",$m,"* ]]; then
        echo "run $i (${runs[$i]}): --modes lacks $m, so its modes get no ratio to it (PARTIAL=1 runs it anyway)" >&2
        bad=1
      fi
    done
  done
  return $bad
}

dry_run() {
  local i total=0 s
  for i in "${!runs[@]}"; do
    echo "== run $i: $(run_args "${runs[$i]}")"
    # shellcheck disable=SC2046
    out=$(python3 bench/colocation/run_matrix.py $(run_args "${runs[$i]}") --dry-run) || { echo "$out"; return 2; }
    sed -n '/^mode /,/^$/p' <<<"$out"
    # The estimate once built (the gpuos modes count even where build/bin/gpuos is missing).
    s=$(awk '/^total once built/ {print $4; f=1} /^total / && !f {t=$2} END {if (!f) print t}' <<<"$out")
    total=$((total + ${s%.*}))
  done
  echo "all runs: ~${total} s ($((total / 60)) min) of device time; REPEATS=$REPEATS WINDOW=$WINDOW BUDGET_S=$BUDGET_S per run"
  ((total > 560)) && echo "longer than one device call: it runs detached; call again with 'collect' at once" \
    "(about $(((total + 559) / 560)) calls of 10 min)"
  ((total > 1700)) && echo "WARNING: longer than a machine is held (30 min): split RUNS over several sessions"
  return 0
}

collect() {
  mkdir -p "$OUT"
  if ! detach_wait "$RUN" "$WAIT_S" "$RUN/all.log" \
    "call again with 'collect' (at once: the machine is given back when idle)"; then
    # What has ended so far comes back too, in case the machine does not stay for the next call.
    tar czf "$OUT/runs-partial.tgz" -C "$work" . 2>/dev/null
    return 3
  fi
  tar czf "$OUT/runs.tgz" -C "$work" . 2>/dev/null
  cat "$RUN/all.log"
  detach_status "$RUN"
}

case ${1:-} in
  collect) : "${OUT:?set OUT}"; collect; exit $? ;;
  _all) IFS=';' read -ra runs <<<"$RUNS"; all_runs; exit $? ;;  # the detached part
esac
: "${RUNS:?set RUNS}"
IFS=';' read -ra runs <<<"$RUNS"
check_baselines || exit 2
if [[ ${1:-} == dry-run || ${1:-} == --dry-run ]]; then dry_run; exit $?; fi
: "${OUT:?set OUT}"
detach_start "$RUN" "$RUN/all.log" bash gpu/budget_runs.sh _all
collect
