#!/usr/bin/env bash
# Issue #40's co-location runs, one after another in one device call, each a run_matrix.py matrix
# with its baselines, and everything (summaries, raw results, gpuosd logs) in one $OUT/runs.tgz
# (a device call returns only a few files). RUNS: ';'-separated run_matrix.py argument lists, each
# with its own --label; every run gets --be-window 12 --budget-s 900 and the whole-GPU variant
# (--variant whole=bench/colocation/configs/budget_whole_gpu.toml) unless it names its own.
# Settings: WINDOW (15). Needs ./build (or a carried .gpucarry) and python3 with torch.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}" "${RUNS:?set RUNS}"
source gpu/lib/detach.sh  # and links a carried build (use_carried_build)
export PYTHONUNBUFFERED=1
work=/tmp/gpuos-budget-runs
rm -rf "$work" && mkdir -p "$work" "$OUT"
rc=0
IFS=';' read -ra runs <<<"$RUNS"
for i in "${!runs[@]}"; do
  args=${runs[$i]}
  [[ $args == *--variant* ]] || args+=" --variant whole=bench/colocation/configs/budget_whole_gpu.toml"
  # shellcheck disable=SC2086  # the run's arguments, split as written
  python3 bench/colocation/run_matrix.py $args --window "${WINDOW:-15}" --be-window 12 --budget-s 900 \
    --out "$work/run-$i" --workdir "$work/work-$i" >"$work/run-$i.log" 2>&1 || rc=1
  cat "$work/run-$i/summary.md" 2>/dev/null || tail -20 "$work/run-$i.log"
done
tar czf "$OUT/runs.tgz" -C "$work" . 2>/dev/null
exit $rc
