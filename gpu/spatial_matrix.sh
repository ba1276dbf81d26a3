#!/usr/bin/env bash
# Spatial sharing on the co-location suite (issue #5): the synthetic workload (fixed-work kernels)
# and optionally the PyTorch one, side by side with the baselines, in one run.
#   OUT=/results bash gpu/spatial_matrix.sh        (repo root; build tree at ./build)
# Settings: WORKLOAD=synthetic|torch LOAD=0.5 WINDOW=15 HP_SMS=0 (gpuos run --sms; 0 = default)
#           LEND_AFTER_MS=-1 (gpuosd's default) MODES=exclusive-hp,exclusive-be,time-slicing,mps
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
mkdir -p "$OUT"
python3 bench/colocation/run_matrix.py --workload "${WORKLOAD:-synthetic}" --load "${LOAD:-0.5}" \
  --window "${WINDOW:-15}" --modes "${MODES:-exclusive-hp,exclusive-be,time-slicing,mps}" \
  --gpuos gpuos-time-priority,gpuos-space-priority --space-hp-sms "${HP_SMS:-0}" \
  --space-lend-after-ms "${LEND_AFTER_MS:--1}" --workdir "$OUT/work" --out "$OUT/matrix" --budget-s "${BUDGET_S:-540}"
