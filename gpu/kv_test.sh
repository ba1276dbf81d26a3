#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# KV pools on the GPU (issue #24), with gpuos-kv-probe tenants under a real gpuosd:
#   1. growth cost: 8 GiB grown in one batch, in 32 MiB chunks (the default) and in 2 MiB ones;
#   2. a borrower that frees blocks when gpuosd sets it a target ("obey"), and one that ignores it
#      and loses the pages by swap at the deadline ("ignore"). A guaranteed ballast tenant fills the
#      GPU so that the borrower (36 GiB) and a requester (20 GiB) do not fit together.
# Every probe fills each page with its number and checks it at the end (verified).
# Usage (repo root, build tree at ./build): OUT=/results bash gpu/kv_test.sh
# Writes $OUT/kv.json (one object: every probe's events, the tenants' ps rows) and $OUT/kv.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
BUILD=${GPUOS_BUILD_DIR:-build}
mkdir -p "$OUT/logs"
dir=$(mktemp -d /tmp/gpuos-kv.XXXXXX)
sock=$dir/gpuosd.sock
cat >"$dir/gpuos.toml" <<TOML
[memory]
swap_pool = "48GiB"
swap_quantum_ms = 1000
swap_headroom = "2GiB"
TOML
source gpu/lib/gpuosd.sh
gpuosd_start "$BUILD/bin/gpuos" "$sock" "$OUT/logs/kv-gpuosd.log" "$BUILD/bin/gpuosd" --socket "$sock" --config "$dir/gpuos.toml"
trap 'gpuosd_stop; rm -rf "$dir"' EXIT
gpuosd_wait 10
run() { "$BUILD/bin/gpuos" run --socket "$sock" "$@"; }
probe="$BUILD/bin/gpuos-kv-probe"
rc=0

echo "== growth cost"
for chunk in 32 2; do
  run --name "grow-$chunk" --mem 16GiB -- "$probe" --grow-mib 8192 --chunk-mib "$chunk" \
    >"$dir/grow-$chunk.jsonl" 2>>"$OUT/logs/kv-probes.log" || rc=1
  cat "$dir/grow-$chunk.jsonl"
done

# The ballast leaves room for the borrower (36 GiB) or the requester (20 GiB), not both: sized from
# the card's memory so the scenario is the same pressure on an H200 (88 GiB ballast) and an H100.
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | head -1)
ballast_mib=$(( (total_mib - 55680) / 32 * 32 ))
echo "== GPU memory ${total_mib} MiB: ballast ${ballast_mib} MiB"

scenario() {  # obey|ignore
  local mode=$1
  rm -f "$dir"/*.stop
  run --name ballast --class guaranteed --mem "$((ballast_mib + 4096))MiB" -- "$probe" --grow-mib "$ballast_mib" --hold-until "$dir/ballast.stop" \
    >"$dir/$mode-ballast.jsonl" 2>>"$OUT/logs/kv-probes.log" &
  local ballast=$!
  for _ in $(seq 600); do grep -q grown "$dir/$mode-ballast.jsonl" 2>/dev/null && break; sleep 0.1; done
  run --name borrower --mem 4GiB --borrow 60GiB -- "$probe" --grow-mib 36864 --on-pressure "$mode" \
    --hold-until "$dir/borrower.stop" >"$dir/$mode-borrower.jsonl" 2>>"$OUT/logs/kv-probes.log" &
  local borrower=$!
  for _ in $(seq 600); do grep -q grown "$dir/$mode-borrower.jsonl" 2>/dev/null && break; sleep 0.1; done
  run --name requester --mem 24GiB -- "$probe" --grow-mib 20480 >"$dir/$mode-requester.jsonl" \
    2>>"$OUT/logs/kv-probes.log" || rc=1
  "$BUILD/bin/gpuos" ps --socket "$sock" --json >"$dir/$mode-ps.json"
  touch "$dir/borrower.stop" "$dir/ballast.stop"
  wait $borrower || rc=1
  wait $ballast || rc=1
  "$BUILD/bin/gpuos" ps --socket "$sock" --all --json >"$dir/$mode-ps-all.json"
  echo "== $mode"
  cat "$dir/$mode-borrower.jsonl" "$dir/$mode-requester.jsonl"
}
scenario obey
scenario ignore

python3 - "$dir" "$OUT" <<'PY' || rc=1
import json, os, subprocess, sys
d, out = sys.argv[1], sys.argv[2]
def lines(name):
    p = os.path.join(d, name)
    return [json.loads(l) for l in open(p) if l.startswith("{")] if os.path.exists(p) else []
res = {"gpu": subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()}
for c in ("32", "2"):
    ev = lines("grow-%s.jsonl" % c)
    g = ev[0] if ev else {}
    res["grow_%smib" % c] = {"ms_per_gib": g.get("grow_ns", 0) / 1e6 / max(g.get("grown_bytes", 1) / 2**30, 1e-9),
                             "call_ms": g.get("ms"), "verified": bool(ev and ev[-1].get("verified"))}
for mode in ("obey", "ignore"):
    r = {k: lines("%s-%s.jsonl" % (mode, k)) for k in ("ballast", "borrower", "requester")}
    ps = json.load(open(os.path.join(d, "%s-ps-all.json" % mode)))["tenants"] if os.path.exists(os.path.join(d, "%s-ps-all.json" % mode)) else []
    r["tenants"] = [t for t in ps if t["name"] in ("ballast", "borrower", "requester")][-3:]
    req = r["requester"][0] if r["requester"] else {}
    r["summary"] = {
        "requester_ok": bool(req.get("ok")), "requester_grow_ms": req.get("ms"), "requester_room_waits": req.get("room_waits"),
        "borrower_targets": [e.get("target_bytes") for e in r["borrower"] if e["event"] == "target"],
        "borrower_shrunk_to": [e.get("resident_bytes") for e in r["borrower"] if e["event"] == "shrunk"],
        "borrower_shrink_ms": [e.get("ms") for e in r["borrower"] if e["event"] == "shrunk"],
        "borrower_swap_outs": next((t["swap_outs"] for t in r["tenants"] if t["name"] == "borrower"), None),
        "verified": all(v and v[-1].get("verified") for v in (r["ballast"], r["borrower"], r["requester"])),
    }
    res[mode] = r
json.dump(res, open(os.path.join(out, "kv.json"), "w"), indent=1)
with open(os.path.join(out, "kv.md"), "w") as f:
    f.write("| what | value |\n|---|---|\n")
    for c in ("32", "2"):
        f.write("| grow 8 GiB, %s MiB chunks | %.2f ms/GiB (verified %s) |\n" % (c, res["grow_%smib" % c]["ms_per_gib"], res["grow_%smib" % c]["verified"]))
    for mode in ("obey", "ignore"):
        f.write("| %s | %s |\n" % (mode, json.dumps(res[mode]["summary"])))
print(open(os.path.join(out, "kv.md")).read())
sys.exit(0 if all(res[m]["summary"]["verified"] and res[m]["summary"]["requester_ok"] for m in ("obey", "ignore")) else 1)
PY
exit $rc
