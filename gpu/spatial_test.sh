#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Spatial sharing on a real GPU: gpuosd supervises the MPS control daemon of a domain, tenants of the
# domain get SM partitions and every launch is placed on a green context of exactly those SMs.
#
#   OUT=/results bash gpu/spatial_test.sh        (repo root; build tree at ./build; nvcc on PATH)
#
# Phases (gpu/tests/spatial.cu: fixed-work kernels of 8 blocks per SM that record %smid, with a
# stream-order check on the legacy stream, a created stream and graph replays):
#   alone      HP alone in the domain (unconfined: all SMs), closed loop with 2 ms gaps
#   space      BE (best-effort, continuous) and HP (guaranteed, same loop) in the domain together:
#              HP should see its partition only and keep its latency; BE runs beside it on the rest
#              and gets HP's SMs lent while HP is idle
#   timeslice  the same two programs without gpuos and without MPS (the driver's time-slicing)
#   torch      PyTorch eager (gpu/tests/torch_eager.py) unmodified in the domain beside BE
# Writes $OUT/spatial.json and $OUT/spatial.md; logs in $OUT/logs/spatial/. Exit 0 iff every check
# passed (no order error, no unplaced launch, partitions as planned, MPS supervised and stopped).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
source gpu/lib/space_domain.sh
: "${OUT:?set OUT}"
BUILD=${GPUOS_BUILD_DIR:-build}
GPUOS=$PWD/$BUILD/bin/gpuos
PY=${PYTHON:-python3}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
LOGS=$OUT/logs/spatial
W=$(mktemp -d /tmp/gpuos-sp-XXXX)
mkdir -p "$LOGS"
ITERS=${ITERS:-40000}
log() { echo "[spatial $(date +%T)] $*" | tee -a "$LOGS/run.log"; }

"$NVCC" -O2 -arch=sm_90 -o "$W/spatial" gpu/tests/spatial.cu >"$LOGS/nvcc.log" 2>&1 || { log "nvcc failed"; cat "$LOGS/nvcc.log"; exit 2; }
export GPUOS_LOG_LEVEL=${GPUOS_LOG_LEVEL:-info}
start_space_domain "$GPUOS" "$W" serve "$LOGS/gpuosd.log" || log "domain serve not available after 20 s"
SOCK=$GPUOS_SOCKET
log "gpuosd $GPUOSD_PID up; MPS control socket: $(ls "$W/mps/serve/pipe" 2>&1 | tr '\n' ' ')"

tenant() {  # tenant NAME CLASS ARGS... (runs in the domain, JSON to $W/NAME.json)
  local name=$1 cls=$2
  shift 2
  timeout 120 "$GPUOS" run --space serve --class "$cls" --name "$name" -- "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
}
SP=("$W/spatial" --iters "$ITERS")

log "phase alone"
tenant hp-alone guaranteed "${SP[@]}" --seconds 4 --gap-us 2000 --json "$W/hp-alone.json"
log "phase space"
tenant be-space best-effort "${SP[@]}" --seconds 9 --json "$W/be-space.json" &
BEP=$!
sleep 2
tenant hp-space guaranteed "${SP[@]}" --seconds 4 --gap-us 2000 --json "$W/hp-space.json"
timeout 10 "$GPUOS" ps --json --socket "$SOCK" >"$W/ps_space.json" 2>&1
wait $BEP
log "phase torch"
tenant be-torch best-effort "${SP[@]}" --seconds 20 --json "$W/be-torch.json" &
BEP=$!
sleep 2
tenant torch guaranteed "$PY" gpu/tests/torch_eager.py "$W/torch.json"
echo $? >"$W/torch.rc"
wait $BEP 2>/dev/null  # BE ends by itself: gpuosd keeps a domain's MPS daemon while tenants live
timeout 10 "$GPUOS" ps --json --all --socket "$SOCK" >"$W/ps_all.json" 2>&1
gpuosd_stop 10
# gpuosd sent `quit`; the control daemon and its server may take a few seconds more to tear down.
for _ in $(seq 30); do pgrep -f "nvidia-cuda-mps" >/dev/null || break; sleep 0.5; done
pgrep -f "nvidia-cuda-mps" >"$W/mps_after.txt" 2>&1
log "phase timeslice (no gpuos, no MPS)"
timeout 60 "$W/spatial" --iters "$ITERS" --seconds 9 --json "$W/be-ts.json" >"$LOGS/be-ts.out" 2>&1 &
BEP=$!
sleep 2
timeout 60 "$W/spatial" --iters "$ITERS" --seconds 4 --gap-us 2000 --json "$W/hp-ts.json" >"$LOGS/hp-ts.out" 2>&1
wait $BEP
cp "$W"/*.json "$W"/*.rc "$W/mps_after.txt" "$LOGS/" 2>/dev/null

R_W=$W R_OUT=$OUT "$PY" - <<'PY'
import json, os, time
w, out = os.environ["R_W"], os.environ["R_OUT"]
def load(name):
    try:
        with open(os.path.join(w, name)) as f:
            text = f.read().strip()
        try:
            return json.loads(text)  # a whole document (gpuos ps --json)
        except ValueError:
            return json.loads(text.splitlines()[-1])  # the last line of a program's output
    except Exception as e:
        return {"error": str(e)}
r = {k: load(k + ".json") for k in ("hp-alone", "hp-space", "be-space", "hp-ts", "be-ts", "be-torch", "torch")}
ps = load("ps_all.json")
tenants = {t["name"]: t for t in ps.get("tenants", [])} if isinstance(ps, dict) else {}
sms = r["hp-alone"].get("device_sms", 132)
checks = {}
for k in ("hp-alone", "hp-space", "be-space", "hp-ts", "be-ts"):
    checks[k + "_ran_in_order"] = r[k].get("order_errors") == 0 and r[k].get("rounds", 0) > 0
checks["hp_alone_unconfined"] = r["hp-alone"].get("sm_counts", {}).get("max") == sms
checks["hp_confined_while_be_runs"] = 0 < r["hp-space"].get("sm_counts", {}).get("max", 999) < sms
checks["be_confined_while_hp_busy"] = r["be-space"].get("sm_counts", {}).get("min", 999) < sms
torch = r["torch"]
checks["torch_passed"] = torch.get("passed") is True
try:
    with open(os.path.join(w, "mps_after.txt")) as f:
        checks["mps_stopped_with_gpuosd"] = f.read().strip() == ""
except OSError:
    checks["mps_stopped_with_gpuosd"] = False
for name in ("hp-space", "be-space", "torch"):
    t = tenants.get(name, {})
    checks[name + "_placed_no_failures"] = t.get("space_launches", 0) > 0 and t.get("space_failures", 1) == 0
def lat(k, p):
    return r[k].get("lat_us", {}).get(p)
rep = {"test": "spatial", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "results": r, "checks": checks,
       "passed": all(checks.values()), "failures": [k for k, v in checks.items() if not v],
       "tenants": {n: {k: t.get(k) for k in ("space_domain", "space_sms", "space_mask", "space_launches",
                                               "space_switches", "space_failures", "launches", "graph_launches")}
                   for n, t in tenants.items()}}
with open(os.path.join(out, "spatial.json"), "w") as f:
    json.dump(rep, f, indent=1)
rows = ["| phase | HP p50 us | HP p99 us | HP SMs (max) | BE SMs (min..max) | BE rounds |", "|---|---|---|---|---|---|"]
rows.append(f"| HP alone (unconfined) | {lat('hp-alone','p50')} | {lat('hp-alone','p99')} | {r['hp-alone'].get('sm_counts',{}).get('max')} | - | - |")
for ph, hp, be in (("gpuos space (MPS + partitions)", "hp-space", "be-space"), ("time-slicing (no gpuos, no MPS)", "hp-ts", "be-ts")):
    b = r[be].get("sm_counts", {})
    rows.append(f"| {ph} | {lat(hp,'p50')} | {lat(hp,'p99')} | {r[hp].get('sm_counts',{}).get('max')} | {b.get('min')}..{b.get('max')} | {r[be].get('rounds')} |")
md = f"# gpuos spatial sharing: {'PASSED' if rep['passed'] else 'FAILED'}\n\n" + "\n".join(rows) + "\n\n"
md += "Failed checks: " + (", ".join(rep["failures"]) or "none") + "\n"
with open(os.path.join(out, "spatial.md"), "w") as f:
    f.write(md)
print(md)
print(json.dumps(rep["tenants"]))
raise SystemExit(0 if rep["passed"] else 1)
PY
rc=$?
rm -rf "$W"
exit $rc
