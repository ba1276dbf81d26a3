#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The memory-oversubscription KPI (vision paper): the co-location suite's HP inference server beside
# BE training when the two together need about 1.25x the GPU's memory. Both hold ballast (1 GiB
# tensors written once: a KV cache / dataset cache), both run under `gpuos run --swap`, gpuosd has a
# swap pool and the priority policy. Compared in the same run with HP alone holding the same memory.
# HP starts only once BE is warm and holds its memory, so gpuosd must swap part of BE out for HP.
# Wanted: no OOM in either tenant, HP TTFT p50/p99 within 5% of exclusive.
#
#   OUT=/results bash gpu/oversub_kpi.sh        (repo root; build tree at ./build)
# Settings: HP_HOLD_GIB=60 BE_HOLD_GIB=112 (with the models: ~62.4 + ~113.4 GiB = 1.26x a 139.8 GiB H200),
#           SWAP_POOL=80GiB LOAD=0.5 WINDOW=20
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
mkdir -p "$OUT"
cfg=$(mktemp /tmp/gpuos-oversub-XXXX.toml)
printf '[memory]\nswap_pool = "%s"\nswap_quantum_ms = 5000\n' "${SWAP_POOL:-80GiB}" >"$cfg"
export GPUOS_CONFIG=$cfg GPUOS_LOG_LEVEL=${GPUOS_LOG_LEVEL:-info}
python3 bench/colocation/run_matrix.py --workload torch --load "${LOAD:-0.5}" --window "${WINDOW:-20}" \
  --modes exclusive-hp,exclusive-be --gpuos gpuos-time-priority --cold-start-s 90 \
  --hp-args "--hold-gib ${HP_HOLD_GIB:-60} --start-timeout ${HP_START_TIMEOUT:-40} --start-anyway" --be-args "--hold-gib ${BE_HOLD_GIB:-112}" --hp-after-be-ready "${HP_AFTER_BE_S:-150}" \
  --gpuos-run-args "run --swap --class {cls} --name {name} --socket {socket} --" \
  --workdir "$OUT/work" --out "$OUT/matrix" --budget-s "${BUDGET_S:-420}"
rc=$?
rm -f "$cfg"
exit $rc
