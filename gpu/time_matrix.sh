#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Time sharing on the co-location suite (issue #4): one HP load, every baseline and the gpuos time
# policies side by side in one run (one device call each; run it for LOAD=0.3, 0.5 and 0.7, and for
# WORKLOAD=synthetic and torch).
#   OUT=/results LOAD=0.5 WORKLOAD=torch bash gpu/time_matrix.sh     (repo root; build tree at ./build)
# Settings: WINDOW=20 MODES=exclusive-hp,exclusive-be,time-slicing,mps,mps-be50
#           GPUOS=gpuos-time-open,gpuos-time-priority BUDGET_S=560 LABEL=time
#           EXTRA="more run_matrix.py flags" (gpu/spatial_matrix.sh uses this script)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
mkdir -p "$OUT"
python3 bench/colocation/run_matrix.py --workload "${WORKLOAD:-torch}" --load "${LOAD:-0.5}" \
  --window "${WINDOW:-20}" --modes "${MODES:-exclusive-hp,exclusive-be,time-slicing,mps,mps-be50}" \
  --gpuos "${GPUOS:-gpuos-time-open,gpuos-time-priority}" --label "${LABEL:-time}-${WORKLOAD:-torch}-${LOAD:-0.5}" \
  --workdir "$OUT/work" --out "$OUT/matrix" --budget-s "${BUDGET_S:-560}" ${EXTRA:-}
