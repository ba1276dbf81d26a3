#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where a guaranteed tenant's time goes under spatial sharing (issue #5): the synthetic HP's kernel
# time (closed loop: launch to synchronize, one kernel at a time, so no queueing) in each condition,
# with the SM clock and power sampled all along. Separates what MPS, a partition, and a best-effort
# tenant beside it (sharing power, clocks and memory but no SMs) each cost.
#
#   OUT=/results bash gpu/spatial_service.sh      (repo root; build tree at ./build)
#
# Conditions (HP: gpuos-synth, fixed work, blocks of 256 threads: HP_BLOCKS in all, else
# HP_BLOCKS_PER_SM per SM; or HP_CMD):
#   alone               no gpuos, no MPS
#   mps-alone           alone in a spatial domain (MPS client, unconfined)
#   part-N-idle-be      confined to N SMs (gpuos run --sms N) beside a best-effort tenant that is
#                       nearly idle (one tiny kernel every 50 ms): the partition alone
#   part-N-busy-be      confined to N SMs beside the suite's BE (full-GPU fixed-work kernels back to
#                       back on the SMs HP does not have)
#   part-auto-*-be      SIZES entry "auto": no --sms, the right-sizer chooses (its timed launches
#                       and its probes included)
# LOG_LEVEL=debug: gpuosd's log (the sizer's and planner's moves) in $OUT/logs/service/gpuosd.log.
# Writes $OUT/service.json, $OUT/service.md, $OUT/clocks.csv (nvidia-smi, 100 ms) and logs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
source gpu/lib/space_domain.sh
: "${OUT:?set OUT}"
BUILD=${GPUOS_BUILD_DIR:-build}
[[ $BUILD == /* ]] || BUILD=$PWD/$BUILD
GPUOS=$BUILD/bin/gpuos
SYNTH=$BUILD/bin/gpuos-synth
PY=${PYTHON:-python3}
SIZES=${SIZES-104 72}  # "" = no partitions: alone and alone in the domain only
COUNT=${COUNT:-4000}
HP_BLOCKS_PER_SM=${HP_BLOCKS_PER_SM:-1}
if [[ -n ${HP_BLOCKS:-} ]]; then GRID=(--blocks "$HP_BLOCKS"); else GRID=(--blocks-per-sm "$HP_BLOCKS_PER_SM"); fi
LOGS=$OUT/logs/service
W=$(mktemp -d /tmp/gpuos-svc-XXXX)
mkdir -p "$LOGS"
log() { echo "[service $(date +%T.%3N)] $*" | tee -a "$LOGS/run.log"; }

nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
  --format=csv,noheader -lms 100 >"$OUT/clocks.csv" 2>"$LOGS/nvidia-smi.err" &
SMI=$!
HP=("$SYNTH" --iters 125000 "${GRID[@]}" --block 256 --mode closed --count "$COUNT" --warmup 200)
# HP_CMD: another closed-loop HP that takes --name and --json and writes p50_us/p99_us (e.g.
# "python3 gpu/tests/torch_step_probe.py": the suite's PyTorch HP, one decode step at a time; or
# "build/bin/kernel_anatomy --rate 2282 --count 20000": the synthetic HP's kernel, Poisson arrivals,
# timed block by block on the GPU, writing <condition>.anatomy.csv beside its JSON).
if [[ -n ${HP_CMD:-} ]]; then read -ra HP <<<"$HP_CMD"; fi
# HP_MODE=saturated (synthetic HP): arrivals far above capacity, so its kernels queue back to back
# and 1e6/throughput is the time per kernel including the gaps between them. A placed launch's
# joins to its stream (events both ways) lie in those gaps, which the closed loop does not see.
if [[ ${HP_MODE:-} == saturated && -z ${HP_CMD:-} ]]; then HP+=(--mode open --rate 1000000); fi
# HP_RATE=R (synthetic HP): Poisson arrivals at R per second (the suite's open loop, same seed in
# every condition), with a per-kernel trace: the report splits each kernel's time on the GPU into
# kernels that queued behind the one before (GPU-side gaps) and kernels that found it idle (host
# launch path included), and gives the host time of the launch call itself.
if [[ -n ${HP_RATE:-} && -z ${HP_CMD:-} ]]; then HP+=(--mode open --rate "$HP_RATE"); fi
# DEVICE_TRACE=1 (with HP_RATE): also the GPU's own timestamps of every kernel (gpuos-synth
# --device-trace), in <condition>.device.csv.
trace_of() {
  [[ -n ${HP_RATE:-} && -z ${HP_CMD:-} ]] || return 0
  echo "--trace $W/$1.trace.csv"
  [[ -n ${DEVICE_TRACE:-} ]] && echo "--device-trace $W/$1.device.csv"
}
BE_BUSY=("$SYNTH" --iters 2500000 --blocks-per-sm 8 --block 256 --mode closed --count 10000000)
# BE_BUSY_CMD: another busy best-effort tenant, run as given (e.g. the suite's training BE:
# "python3 bench/colocation/be_train.py --json /dev/null"), in place of the compute-bound synth.
if [[ -n ${BE_BUSY_CMD:-} ]]; then read -ra BE_BUSY <<<"$BE_BUSY_CMD"; fi
BE_IDLE=("$SYNTH" --iters 1000 --blocks-per-sm 1 --block 32 --mode closed --count 10000000 --gap-us 50000)
mark() { echo "$(date +%Y/%m/%d\ %T.%3N),$1" >>"$OUT/phases.csv"; }

mark "alone start"; log "alone"
"${HP[@]}" --name hp --json "$W/alone.json" $(trace_of alone) >"$LOGS/alone.out" 2>&1
mark "alone end"

start_space_domain "$GPUOS" "$W" svc "$LOGS/gpuosd.log" '[daemon]' "log_level = \"${LOG_LEVEL:-info}\"" ||
  log "domain svc not available after 20 s"
SOCK=$GPUOS_SOCKET
run_in() {  # run_in NAME CLASS [--sms N] -- ARGS...
  local name=$1 cls=$2
  shift 2
  timeout 120 "$GPUOS" run --space svc --class "$cls" --name "$name" "$@" >"$LOGS/$name.out" 2>&1
}
mark "mps-alone start"; log "mps-alone"
run_in hp guaranteed -- "${HP[@]}" --name hp --json "$W/mps-alone.json" $(trace_of mps-alone)
mark "mps-alone end"
for be in idle busy; do
  if [[ $be == idle ]]; then BE=("${BE_IDLE[@]}" --name be-idle --json "$W/be-idle.json"); else BE=("${BE_BUSY[@]}"); fi
  [[ $be == busy && -z ${BE_BUSY_CMD:-} ]] && BE+=(--name be-busy --json "$W/be-busy.json")
  run_in "be-$be" best-effort -- "${BE[@]}" &  # stopped below by its gpuos run (--name be-$be)
  BEP=$!
  sleep "${BE_WARM_S:-3}"  # BE_WARM_S: a torch BE takes ~15 s to reach its steady steps
  for n in $SIZES; do
    mark "part-$n-$be-be start"; log "part-$n-$be-be"
    if [[ $n == auto ]]; then SMS=(); else SMS=(--sms "$n"); fi
    run_in hp guaranteed "${SMS[@]}" -- "${HP[@]}" --name hp --json "$W/part-$n-$be-be.json" \
      $(trace_of "part-$n-$be-be")
    mark "part-$n-$be-be end"
  done
  timeout 10 "$GPUOS" ps --json --all --socket "$SOCK" >"$W/ps-$be.json" 2>&1
  pkill -INT -f -- "--name be-$be" 2>/dev/null
  wait $BEP
done
gpuosd_stop 15
kill "$SMI" 2>/dev/null
cp "$W"/*.json "$W"/*.trace.csv "$W"/*.anatomy.csv "$W"/*.device.csv "$LOGS/" 2>/dev/null

R_W=$W R_OUT=$OUT R_SIZES="$SIZES" "$PY" - <<'PY'
import csv, datetime, json, os
w, out = os.environ["R_W"], os.environ["R_OUT"]
def load(name):
    try:
        with open(os.path.join(w, name + ".json")) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception as e:
        return {"error": str(e)}
names = ["alone", "mps-alone"] + [f"part-{n}-{be}-be" for be in ("idle", "busy") for n in os.environ["R_SIZES"].split()]
def ts(s):
    return datetime.datetime.strptime(s.strip(), "%Y/%m/%d %H:%M:%S.%f")
clocks = []
try:
    with open(os.path.join(out, "clocks.csv")) as f:
        for row in csv.reader(f):
            try:
                clocks.append((ts(row[0]), float(row[1].split()[0]), float(row[3].split()[0])))
            except (ValueError, IndexError):
                pass
except OSError:
    pass
phases = {}
try:
    with open(os.path.join(out, "phases.csv")) as f:
        for line in f:
            t, what = line.rstrip("\n").split(",", 1)
            name, edge = what.rsplit(" ", 1)
            phases.setdefault(name, {})[edge] = ts(t)
except OSError:
    pass
def split(name):
    """Per kernel of an open-loop trace: its time on the GPU, by whether it queued (arrived before
    the kernel ahead of it completed: GPU-side gap included) or found the GPU idle (its arrival to
    its completion: host launch path included). Medians, us."""
    try:
        with open(os.path.join(w, name + ".trace.csv")) as f:
            rows = [list(map(float, l.split(","))) for l in f.read().split("\n")[1:] if l]
    except OSError:
        return {}
    queued, idle, prev = [], [], 0.0
    for start_ns, lat_us, _ in sorted(rows):
        done = start_ns + lat_us * 1000.0
        (queued if start_ns < prev else idle).append((done - max(start_ns, prev)) / 1000.0)
        prev = max(prev, done)
    med = lambda a: round(sorted(a)[len(a) // 2], 2) if a else None
    return {"queued_kernel_us_p50": med(queued), "idle_kernel_us_p50": med(idle),
            "queued_kernels": len(queued), "idle_kernels": len(idle)}
rows, res = [], {}
base = load("alone").get("p50_us")
for n in names:
    r = load(n)
    p = phases.get(n, {})
    cs = [c for c in clocks if p.get("start") and p.get("end") and p["start"] <= c[0] <= p["end"]]
    sm = sorted(c[1] for c in cs)
    pw = [c[2] for c in cs]
    res[n] = {"p50_us": r.get("p50_us"), "p99_us": r.get("p99_us"), "mean_us": r.get("mean_us"),
              "eager_p50_us": r.get("eager_p50_us"), "kernels": r.get("kernels"),
              "us_per_kernel": round(1e6 / r["throughput_per_s"], 2) if r.get("throughput_per_s") else None, "verified": r.get("verified"), "error": r.get("error"),
              "sm_clock_mhz_median": sm[len(sm) // 2] if sm else None,
              "sm_clock_mhz_min": sm[0] if sm else None,
              "power_w_mean": sum(pw) / len(pw) if pw else None, "clock_samples": len(sm),
              "launch_call_p50_us": r.get("launch_call_p50_us"), **split(n)}
    x = res[n]
    rel = f"{x['p50_us'] / base:.3f}" if base and x["p50_us"] else "-"
    erel = f" ({x['eager_p50_us']} eager)" if x["eager_p50_us"] else ""
    rows.append(f"| {n} | {x['p50_us']}{erel} | {x['p99_us']} | {rel} | {x['us_per_kernel']} | {x['launch_call_p50_us']} | "
                f"{x.get('queued_kernel_us_p50', '-')} | {x.get('idle_kernel_us_p50', '-')} | {x['sm_clock_mhz_median']} | {x['sm_clock_mhz_min']} | "
                f"{x['power_w_mean'] and round(x['power_w_mean'])} |")
with open(os.path.join(out, "service.json"), "w") as f:
    json.dump(res, f, indent=1)
md = ("| condition | HP kernel p50 us | p99 us | p50 / alone | us per kernel (1e6 / throughput) | launch call p50 us | "
      "queued kernel p50 us | idle kernel p50 us | SM MHz median | SM MHz min | power W |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
with open(os.path.join(out, "service.md"), "w") as f:
    f.write(md)
print(md)
PY
rm -rf "$W"
