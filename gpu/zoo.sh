#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue #56's zoo in one command: servers of 1B, 3B and 8B (hp_server.py --params-b), loads of
# 10-70%, beside training or batch inference, with fixed request lengths (128 / 32) or lengths drawn
# from the Azure LLM inference trace 2023 (bench/colocation/lengths.py), from one or more arrival
# seeds. ZOO names a slice; each of its points is one run_matrix.py run, all of them run by
# gpu/budget_runs.sh (so they detach and are collected as its runs are), and ONE table over them at
# the end (bench/colocation/zoo_table.py: $OUT/zoo.md, $OUT/zoo.json).
#
#   ZOO="sizes=1,8 loads=0.3 be=train lengths=fixed" bash gpu/zoo.sh dry-run   # the plan, device time
#   ZOO="sizes=1,8 loads=0.3 be=train lengths=fixed" OUT=/results bash gpu/zoo.sh  # starts, waits, collects
#   OUT=/results bash gpu/zoo.sh collect     # a second call, at once, while the first said "still running"
#   OUT=/results bash gpu/zoo.sh table       # the table from what has ended so far
#   ZOO="..." bash gpu/zoo.sh plan           # only the run_matrix.py arguments, one run a line
#
# ZOO: space-separated KEY=comma-list (every key optional; the default is the whole zoo):
#   sizes=1,3,8  loads=0.1,0.3,0.5,0.7  be=train,infer  lengths=fixed,azure-conv,azure-code  seeds=1
#   modes=exclusive-hp,exclusive-be,mps-prio1-t10,mps-prio1-t25,mps-prio1-t50,time-slicing
#   gpuos=gpuos-space-slo-1.5 (gpuosd's defaults, B = 1.5)
#   window=S (HP's window per mode: default WINDOW, 15 s, with fixed lengths; 60 s with drawn ones,
#             whose requests are fewer and longer; drawn ones also get --calibrate-s 20 --drain-s 30)
# Each point is labelled zoo-<size>b-<load>-<be>-<lengths> (and -s<seed> for a seed other than 1).
# MORE="..." appends run_matrix.py flags to every point (last, so they override; e.g. --fake and
# short windows for a run without a GPU).
# The whole zoo is 72 points, hours of device time: run it in slices of about 25 minutes (dry-run
# says). REPEATS, WINDOW, BUDGET_S and WAIT_S are budget_runs.sh's (REPEATS=5 WINDOW=60: #40's
# method); RUN (/tmp/gpuos-zoo-runs) is where the runs go on the device.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
export RUN=${RUN:-/tmp/gpuos-zoo-runs}

sizes=1,3,8 loads=0.1,0.3,0.5,0.7 be=train,infer lengths=fixed,azure-conv,azure-code seeds=1
modes=exclusive-hp,exclusive-be,mps-prio1-t10,mps-prio1-t25,mps-prio1-t50,time-slicing
gpuos=gpuos-space-slo-1.5 window=

parse_zoo() {
  local w key val
  for w in ${ZOO:-}; do
    key=${w%%=*} val=${w#*=}
    if [[ $w != *=* || -z $val ]]; then
      echo "zoo: '$w': KEY=VALUE (sizes, loads, be, lengths, seeds, modes, gpuos, window)" >&2
      return 2
    fi
    case $key in
      sizes) [[ $val =~ ^[0-9.]+(,[0-9.]+)*$ ]] || { echo "zoo: sizes=$val: numbers (billions)" >&2; return 2; } ;;
      loads) [[ $val =~ ^0?\.[0-9]+(,0?\.[0-9]+)*$ ]] || { echo "zoo: loads=$val: fractions in (0, 1)" >&2; return 2; } ;;
      be) [[ $val =~ ^(train|infer)(,(train|infer))*$ ]] || { echo "zoo: be=$val: train, infer" >&2; return 2; } ;;
      lengths) [[ $val =~ ^(fixed|azure-conv|azure-code)(,(fixed|azure-conv|azure-code))*$ ]] ||
        { echo "zoo: lengths=$val: fixed, azure-conv, azure-code" >&2; return 2; } ;;
      seeds) [[ $val =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "zoo: seeds=$val: integers" >&2; return 2; } ;;
      window) [[ $val =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "zoo: window=$val: seconds" >&2; return 2; } ;;
      modes | gpuos) ;;
      *) echo "zoo: unknown key '$key' (sizes, loads, be, lengths, seeds, modes, gpuos, window)" >&2; return 2 ;;
    esac
    printf -v "$key" %s "$val"
  done
}

# One line per point: its run_matrix.py arguments (budget_runs.sh puts its settings first, so a
# point's --window overrides WINDOW).
zoo_runs() {
  local s l b x n label extra
  local -a S L B X N
  IFS=, read -ra S <<<"$sizes"
  IFS=, read -ra L <<<"$loads"
  IFS=, read -ra B <<<"$be"
  IFS=, read -ra X <<<"$lengths"
  IFS=, read -ra N <<<"$seeds"
  for s in "${S[@]}"; do for x in "${X[@]}"; do for b in "${B[@]}"; do for l in "${L[@]}"; do for n in "${N[@]}"; do
    label="zoo-${s}b-${l}-${b}-${x}"
    [[ $n != 1 ]] && label+="-s$n"
    extra=""
    if [[ $x != fixed ]]; then
      extra=" --window ${window:-60} --calibrate-s 20 --drain-s 30"
    elif [[ -n $window ]]; then
      extra=" --window $window"
    fi
    echo "--params-b $s --load $l --be $b --lengths $x --seed $n --modes $modes --gpuos $gpuos$extra --label $label${MORE:+ $MORE}"
  done; done; done; done; done
}

table() {
  : "${OUT:?set OUT}"
  mkdir -p "$OUT"
  if ! compgen -G "$RUN/work/run-*/summary.json" >/dev/null; then
    echo "zoo: no run has a summary yet under $RUN/work" >&2
    return 3
  fi
  python3 bench/colocation/zoo_table.py "$RUN/work" --md "$OUT/zoo.md" --json "$OUT/zoo.json"
}

case ${1:-} in
  collect) : "${OUT:?set OUT}"; bash gpu/budget_runs.sh collect; rc=$?; table; exit $rc ;;
  table) table; exit $? ;;
esac
parse_zoo || exit 2
mapfile -t points < <(zoo_runs)
if [[ ${1:-} == plan ]]; then
  printf '%s\n' "${points[@]}"
  exit 0
fi
RUNS=$(IFS=';'; echo "${points[*]}")
export RUNS
if [[ ${1:-} == dry-run || ${1:-} == --dry-run ]]; then
  echo "zoo: ${#points[@]} point(s): ZOO='${ZOO:-}'"
  bash gpu/budget_runs.sh dry-run
  exit $?
fi
: "${OUT:?set OUT}"
bash gpu/budget_runs.sh
rc=$?
table
exit $rc
