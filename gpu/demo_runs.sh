#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `gpuos demo --json` N times on the GPU (issue #40's done-when: three runs, each with hp_p99_ratio
# <= 1.1 and a verdict that matches its numbers): $OUT/demo-1.json .. demo-N.json, each with the
# commit, and demo.md (one row per run, and whether the line holds: bench/colocation/check_demo.py).
# Settings: N (3), SECONDS_EACH (2), SHARING (auto); GPUOS_COMMIT (else git's HEAD).
# Needs ./build (or a carried .gpucarry, linked as build); MPS for the spatial demo.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
source gpu/lib/detach.sh  # and links a carried build (use_carried_build)
mkdir -p "$OUT"
rc=0
for i in $(seq 1 "${N:-3}"); do
  timeout 300 build/bin/gpuos demo --json --seconds "${SECONDS_EACH:-2}" --sharing "${SHARING:-auto}" \
    >"$OUT/demo-$i.json" 2>"$OUT/demo-$i.err" || rc=1
done
# The table, the done-when verdict, and the commit in each file (GPUOS_COMMIT: the tree here may
# be a copy without .git).
commit=${GPUOS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || true)}
files=()
for i in $(seq 1 "${N:-3}"); do files+=("$OUT/demo-$i.json"); done
python3 bench/colocation/check_demo.py "${files[@]}" ${commit:+--stamp "$commit"} --md "$OUT/demo.md"
exit $rc
