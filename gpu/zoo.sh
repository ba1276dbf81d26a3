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
#   method=point (one point per seed: a point check) or v2 (issue #56's method v2: ONE point per
#             size/load/BE/lengths whose run replays every seed alone and co-located back to back,
#             run_matrix.py --paired-seeds; seeds default to 1,2,3 there, and fewer than 3 is a point
#             check; labelled ...-v2; REPEATS stays 1: each pair has its own run alone; its run's
#             --budget-s is BUDGET_S or 1700. About 15 min (1B) to 19 min (8B) a point at 15 s windows:
#             the four headline points are ~69 min of device time, more than one session's 30 min, so
#             run them a point or two per session)
#   modes=exclusive-hp,exclusive-be,mps-prio1-t10,mps-prio1-t25,mps-prio1-t50,time-slicing
#   gpuos=gpuos-space-slo-1.5 (gpuosd's defaults, B = 1.5)
#   window=S (HP's window per mode: default WINDOW, 15 s, with fixed lengths; 60 s with drawn ones,
#             whose requests are fewer and longer; drawn ones also get --calibrate-s 20 --drain-s 30)
# Each point is labelled zoo-<size>b-<load>-<be>-<lengths> (and -s<seed> for a seed other than 1;
# -v2 for a point by method v2). The table (zoo.md, zoo.json) has per point the latency bounds and
# the aggregate at the SLO (attainment, HP goodput / alone, BE / alone, against the best baseline and
# dedicated GPUs), the highest load at 99% attainment over the slice's loads, and each run's
# slo_frontier.png is beside its summary.json (bench/colocation/README.md, "The headline").
# The four headline points by method v2 (1B and 8B at 30% and 50% beside training):
#   ZOO="sizes=1,8 loads=0.3,0.5 be=train lengths=fixed method=v2" bash gpu/zoo.sh dry-run
# MORE="..." appends run_matrix.py flags to every point (last, so they override; e.g. --fake and
# short windows for a run without a GPU).
# The whole zoo is 72 points, hours of device time: run it in slices of about 25 minutes (dry-run
# says). REPEATS, WINDOW, BUDGET_S and WAIT_S are budget_runs.sh's (REPEATS=5 WINDOW=60: #40's
# method); RUN (/tmp/gpuos-zoo-runs) is where the runs go on the device.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
export RUN=${RUN:-/tmp/gpuos-zoo-runs}

sizes=1,3,8 loads=0.1,0.3,0.5,0.7 be=train,infer lengths=fixed,azure-conv,azure-code seeds=
modes=exclusive-hp,exclusive-be,mps-prio1-t10,mps-prio1-t25,mps-prio1-t50,time-slicing
gpuos=gpuos-space-slo-1.5 window= method=point

parse_zoo() {
  local w key val
  for w in ${ZOO:-}; do
    key=${w%%=*} val=${w#*=}
    if [[ $w != *=* || -z $val ]]; then
      echo "zoo: '$w': KEY=VALUE (sizes, loads, be, lengths, seeds, modes, gpuos, window, method)" >&2
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
      method) [[ $val =~ ^(point|v2)$ ]] || { echo "zoo: method=$val: point, v2" >&2; return 2; } ;;
      modes | gpuos) ;;
      *) echo "zoo: unknown key '$key' (sizes, loads, be, lengths, seeds, modes, gpuos, window, method)" >&2; return 2 ;;
    esac
    printf -v "$key" %s "$val"
  done
}

# One line per point: its run_matrix.py arguments (budget_runs.sh puts its settings first, so a
# point's --window overrides WINDOW).
zoo_runs() {
  local s l b x n label extra seed
  local -a S L B X N
  IFS=, read -ra S <<<"$sizes"
  IFS=, read -ra L <<<"$loads"
  IFS=, read -ra B <<<"$be"
  IFS=, read -ra X <<<"$lengths"
  if [[ $method == v2 ]]; then
    N=(v2)  # one point whose run pairs every seed
  else
    IFS=, read -ra N <<<"${seeds:-1}"
  fi
  for s in "${S[@]}"; do for x in "${X[@]}"; do for b in "${B[@]}"; do for l in "${L[@]}"; do for n in "${N[@]}"; do
    label="zoo-${s}b-${l}-${b}-${x}"
    if [[ $n == v2 ]]; then
      label+="-v2"
      seed="${seeds:-1,2,3}"
      # A paired run is 3x as many HP runs: ~15-20 min at 15 s windows (dry-run); 1700 s keeps it
      # whole within a machine's 30 min (budget_runs.sh's 900 s would skip its last modes).
      seed="--seed ${seed%%,*} --paired-seeds $seed --budget-s ${BUDGET_S:-1700}"
    else
      [[ $n != 1 ]] && label+="-s$n"
      seed="--seed $n"
    fi
    extra=""
    if [[ $x != fixed ]]; then
      extra=" --window ${window:-60} --calibrate-s 20 --drain-s 30"
    elif [[ -n $window ]]; then
      extra=" --window $window"
    fi
    echo "--params-b $s --load $l --be $b --lengths $x $seed --modes $modes --gpuos $gpuos$extra --label $label${MORE:+ $MORE}"
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
