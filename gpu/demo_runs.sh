#!/usr/bin/env bash
# `gpuos demo --json` N times on the GPU (issue #40's done-when: three runs, each with hp_p99_ratio
# <= 1.1 and a verdict that matches its numbers): $OUT/demo-1.json .. demo-N.json, and demo.md (one
# row per run). Settings: N (3), SECONDS_EACH (2), SHARING (auto).
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
python3 - "$OUT" "${N:-3}" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
rows = ["| run | sharing | hp p50 x | hp p99 x | be vs alone | verdict |", "|---|---|---|---|---|---|"]
for i in range(1, n + 1):
    try:
        d = json.load(open(f"{out}/demo-{i}.json"))
        rows.append(f"| {i} | {d.get('sharing')} | {d['hp_p50_ratio']:.3f} | {d['hp_p99_ratio']:.3f} | "
                    f"{d.get('be_vs_alone', 0):.3f} | {d['verdict']} |")
    except Exception as e:  # a failed run: say so in its row
        rows.append(f"| {i} | - | - | - | - | failed: {e} |")
open(f"{out}/demo.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
exit $rc
