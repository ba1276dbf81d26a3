#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Memory swapping on a real GPU: two PyTorch tenants that each hold GIB GiB (default 80) run at once
# under `gpuos run --swap`; together they need more than the card (140 GiB on the H200), so gpuosd
# must take turns: swap one tenant's memory out to its host pool, let the other run, and restore the
# first at the same device addresses before it runs again. Each tenant (gpu/tests/torch_swap.py)
# keeps re-checking checksums and data_ptr() of all its memory, so any lost, zeroed or misplaced page
# is a mismatch.
#
#   OUT=/results bash gpu/swap_test.sh          (repo root; build tree at ./build or GPUOS_BUILD_DIR)
#
# GPU-only: it needs PyTorch with CUDA. On the driver test double there is no torch, so this script
# is not meant to run there (the double can still exercise the daemon side with gpuos-synth).
#
# Settings (environment):
#   GIB=80                   GiB each tenant holds (a smaller smoke run: GIB=8 SWAP_POOL=10GiB)
#   SECONDS_PER_TENANT=60    how long each tenant keeps working after its setup
#   SWAP_POOL=84GiB          [memory] swap_pool of the private gpuosd ("" = no swapping)
#   SWAP_QUANTUM_MS=4000     [memory] swap_quantum_ms
#   MEM_HEADROOM_GIB=2       each tenant's --mem quota is GIB + this (torch's small blocks, temporaries)
#   CHUNK_MIB=1024           tensor size in the tenants
#   SWAP_POLICY=             [scheduler] policy to set ("" = the daemon's default)
#   SWAP_HEADROOM=           [memory] swap_headroom to set ("" = the daemon's default)
#   EXPECT_SWAPS=auto        1: require swap-outs and swap-ins; 0: do not; auto: require them when the
#                            two quotas together exceed the GPU's memory
#   TENANT_TIMEOUT           hard limit for the tenants in s (default SECONDS_PER_TENANT + 300)
#   READY_TIMEOUT=120        the second tenant starts once the first finished its setup, or after this
#   EXTRA_TENANT_ARGS=       more arguments for torch_swap.py
#   PYTHON=python3           the Python with torch (the report itself uses python3)
# Writes $OUT/swap.json and $OUT/swap.md (always, also when gpuosd does not start: then passed=false
# with the reason); logs under $OUT/logs: nvidia-smi-mem.csv (every 2 s; nvidia-smi-apps.csv per
# process), swap-gpuosd.log, swap-a.{out,err}, swap-b.{out,err}, result-swap-*.json, swap-ps_all.json,
# swap-gpuos.toml (the config), swap-daemon_status.json. Exit 0 iff passed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$(pwd)
if [[ -z ${OUT:-} ]]; then
  echo "swap_test.sh: set OUT to the results directory" >&2
  exit 2
fi
mkdir -p "$OUT/logs" || exit 2
OUT=$(cd "$OUT" && pwd)
LOGS=$OUT/logs

BUILD=${GPUOS_BUILD_DIR:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
PY=${PYTHON:-python3}
GPUOS=$BUILD/bin/gpuos
GPUOSD=$BUILD/bin/gpuosd
GIB=${GIB:-80}
SECONDS_PER_TENANT=${SECONDS_PER_TENANT:-60}
SWAP_POOL=${SWAP_POOL-84GiB}
SWAP_QUANTUM_MS=${SWAP_QUANTUM_MS:-4000}
MEM_HEADROOM_GIB=${MEM_HEADROOM_GIB:-2}
CHUNK_MIB=${CHUNK_MIB:-1024}
SWAP_POLICY=${SWAP_POLICY:-}
SWAP_HEADROOM=${SWAP_HEADROOM:-}
EXPECT_SWAPS=${EXPECT_SWAPS:-auto}
READY_TIMEOUT=${READY_TIMEOUT:-120}
EXTRA_TENANT_ARGS=${EXTRA_TENANT_ARGS:-}
TENANT_TIMEOUT=${TENANT_TIMEOUT:-$(awk -v s="$SECONDS_PER_TENANT" 'BEGIN { printf "%d", s + 300 }')}
MEM_MIB=$(awk -v g="$GIB" -v h="$MEM_HEADROOM_GIB" 'BEGIN { printf "%d", (g + h) * 1024 }')

W=/tmp/gpuos-swap
SOCK=$W/gpuosd.sock
CFG=$W/gpuos.toml
export GPUOS_SOCKET=$SOCK
export GPUOS_CONFIG=$CFG
export GPUOS_CLI=$GPUOS
export PYTHONDONTWRITEBYTECODE=1
export PYTHONUNBUFFERED=1
unset LD_PRELOAD

log() { printf '[swap %s] %s\n' "$(date +%T)" "$*"; }
reason() { log "FAIL: $*"; printf '%s\n' "$*" >>"$W/reasons.txt"; }
t_script=$(date +%s)

rm -rf "$W"
mkdir -p "$W" || exit 2
: >"$W/reasons.txt"
rm -f "$OUT/swap.json" "$OUT/swap.md"

# report: writes $OUT/swap.json and $OUT/swap.md from what is in $W and $LOGS (defined first, so that an
# interrupted run reports too); returns 0 iff passed.
GPU_NAME=unknown
DRIVER=unknown
GPU_TOTAL_MIB=0
daemon_started=0
REPORTED=0
report() {
  REPORTED=1
  R_W=$W R_LOGS=$LOGS R_OUT=$OUT R_GPU=$GPU_NAME R_DRIVER=$DRIVER R_GPU_TOTAL_MIB=$GPU_TOTAL_MIB \
  R_GIB=$GIB R_MEM_MIB=$MEM_MIB R_SECONDS=$SECONDS_PER_TENANT R_POOL=$SWAP_POOL R_QUANTUM=$SWAP_QUANTUM_MS \
  R_CHUNK=$CHUNK_MIB R_POLICY=$SWAP_POLICY R_TIMEOUT=$TENANT_TIMEOUT R_EXPECT=$EXPECT_SWAPS \
  R_STARTED=$daemon_started timeout 60 python3 - <<'PY'
import json, os, sys, time

E = os.environ
w, logs, out = E["R_W"], E["R_LOGS"], E["R_OUT"]
NAMES = ("swap-a", "swap-b")
SWAP_KEYS = ("swap_outs", "swap_ins", "swap_out_bytes", "swap_in_bytes", "swap_out_ns", "swap_in_ns",
             "max_swap_in_ns", "swapped_bytes", "mem_waits")
REC_KEYS = ("id", "pid", "state", "class", "mem_used_bytes", "mem_peak_bytes", "mem_quota_bytes", "launches",
            "gate_waits", "gate_wait_ns", "alloc_failures", "swappable", "swap_state", "mem_wait_ns") + SWAP_KEYS


def num(text, kind=float, default=0):
    try:
        return kind(text)
    except (TypeError, ValueError):
        return default


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_json_line(path, key):
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if isinstance(d, dict) and key in d:
                return d
    return None


def tenant_result(name):
    r = load_json(os.path.join(w, name + ".json"))
    if isinstance(r, dict):
        return r, "json"
    r = last_json_line(os.path.join(logs, name + ".out"), "iterations")
    if r:
        return r, "stdout"
    p = last_json_line(os.path.join(logs, name + ".err"), "progress")
    if p:
        return dict(p, partial=True, passed=False, error="no final result (killed?); last progress line"), "progress"
    return {"passed": False, "error": "no result (see logs/%s.err)" % name}, None


def rc_of(name):
    try:
        with open(os.path.join(w, "rc-" + name)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def smi_max_used():
    best = None
    try:
        with open(os.path.join(logs, "nvidia-smi-mem.csv")) as f:
            for line in f.readlines()[1:]:
                parts = [p.strip() for p in line.split(",")]
                if len(parts) >= 4 and parts[2].isdigit():
                    used, total = int(parts[2]), num(parts[3], int)
                    if best is None or used > best[0]:
                        best = (used, total)
    except OSError:
        pass
    return best


def main():
    reasons = []
    try:
        with open(os.path.join(w, "reasons.txt")) as f:
            reasons = [l.strip() for l in f if l.strip()]
    except OSError:
        pass
    daemon_started = E.get("R_STARTED") == "1"
    daemon = load_json(os.path.join(w, "daemon_status.json")) or {}
    ps = load_json(os.path.join(w, "ps_all.json"))
    ps_tenants = ps.get("tenants", []) if isinstance(ps, dict) else []
    quota = num(E.get("R_MEM_MIB"), int) * 2**20
    total = 0
    if isinstance(ps, dict) and ps.get("gpus"):
        total = num(ps["gpus"][0].get("total_mem_bytes"), int)
    if not total:
        total = num(E.get("R_GPU_TOTAL_MIB"), int) * 2**20
    expect = E.get("R_EXPECT", "auto")
    expect_swaps = expect == "1" or (expect == "auto" and (total == 0 or 2 * quota > total))

    tenants, recs = [], []
    for name in NAMES:
        res, src = tenant_result(name)
        mine = [t for t in ps_tenants if t.get("name") == name]
        rec = max(mine, key=lambda t: num(t.get("id"), int)) if mine else None
        if rec is not None:
            recs.append(rec)
        tenants.append({"name": name, "exit_code": rc_of(name), "result_from": src, "result": res,
                        "daemon": {k: rec.get(k) for k in REC_KEYS if k in rec} if rec else None})

    have_swap = bool(recs) and all(k in r for r in recs for k in SWAP_KEYS)

    def total_of(key):
        return sum(num(r.get(key), int) for r in recs)

    out_b, out_ns, in_b, in_ns = (total_of(k) for k in ("swap_out_bytes", "swap_out_ns", "swap_in_bytes", "swap_in_ns"))
    swap_ins = total_of("swap_ins")
    max_in_ns = max([num(r.get("max_swap_in_ns"), int) for r in recs] or [0])
    swaps = {k: total_of(k) for k in ("swap_outs", "swap_ins", "swap_out_bytes", "swap_in_bytes", "mem_waits")}
    swaps["swapped_bytes_at_end"] = total_of("swapped_bytes")
    results = [t["result"] for t in tenants]
    mismatches = sum(num(r.get("mismatches"), int) for r in results)
    ooms = sum(num(r.get("ooms"), int) for r in results)
    smi = smi_max_used()

    checks = {"daemon_started": daemon_started,
              "daemon_alive_at_end": bool(daemon.get("alive_at_end")) if daemon_started else False}
    for t in tenants:
        n = t["name"]
        checks[n + "_exit_0"] = t["exit_code"] == 0
        checks[n + "_passed"] = t["result"].get("passed") is True
        checks[n + "_seen_exited_by_daemon"] = bool(t["daemon"]) and t["daemon"].get("state") == "exited"
        if t["daemon"] and "swappable" in t["daemon"]:
            checks[n + "_swappable"] = t["daemon"]["swappable"] is True
    checks["no_mismatches"] = mismatches == 0 and all("mismatches" in r for r in results)
    checks["no_ooms"] = ooms == 0
    checks["swap_counters_in_ps"] = have_swap
    if expect_swaps:
        checks["swapped_out_and_in"] = swaps["swap_outs"] >= 1 and swap_ins >= 1
    failures = [k for k, ok in checks.items() if not ok]

    rep = {
        "test": "swap", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "gpu": E.get("R_GPU", "unknown"), "driver": E.get("R_DRIVER", "unknown"),
        "gpu_total_bytes": total,
        "config": {"gib_per_tenant": num(E.get("R_GIB")), "mem_quota_bytes": quota,
                   "seconds_per_tenant": num(E.get("R_SECONDS")), "swap_pool": E.get("R_POOL", ""),
                   "swap_quantum_ms": num(E.get("R_QUANTUM"), int), "chunk_mib": num(E.get("R_CHUNK"), int),
                   "policy": E.get("R_POLICY") or "(daemon default)", "tenant_timeout_s": num(E.get("R_TIMEOUT"), int),
                   "expect_swaps": expect_swaps},
        "swap_out_gbps": round(out_b / out_ns, 3) if out_ns else None,
        "swap_in_gbps": round(in_b / in_ns, 3) if in_ns else None,
        "resume_ms": {"mean": round(in_ns / swap_ins / 1e6, 3) if swap_ins else None,
                      "max": round(max_in_ns / 1e6, 3) if recs and have_swap else None},
        "swaps": swaps,
        "mismatches": mismatches, "ooms": ooms,
        "pauses": {t["name"]: t["result"].get("pauses") for t in tenants},
        "max_gap_s": {t["name"]: t["result"].get("max_gap_s") for t in tenants},
        "iterations": {t["name"]: t["result"].get("iterations") for t in tenants},
        "gpu_mem_used_max_mib": smi[0] if smi else None,
        "tenants": tenants, "daemon": daemon, "checks": checks, "failures": failures, "reasons": reasons,
        "reason": (reasons[0] if reasons else "failed checks: " + ", ".join(failures)) if failures else None,
        "passed": not failures,
    }
    with open(os.path.join(out, "swap.json"), "w") as f:
        json.dump(rep, f, indent=1)
        f.write("\n")

    def fmt(v, unit=""):
        return "-" if v is None else f"{v}{unit}"

    gib = lambda b: f"{b / 2**30:.1f} GiB"
    c = rep["config"]
    md = [f"# gpuos swap test: {'PASSED' if rep['passed'] else 'FAILED'}", "",
          f"{rep['date']} · {rep['gpu']} · driver {rep['driver']} · 2 tenants x {c['gib_per_tenant']:g} GiB "
          f"(quota {gib(quota)}), {c['seconds_per_tenant']:g} s each · swap pool {c['swap_pool'] or 'none'}, "
          f"quantum {c['swap_quantum_ms']} ms · policy {c['policy']}", "",
          "| figure | value |", "|---|---|",
          f"| swap-out bandwidth | {fmt(rep['swap_out_gbps'], ' GB/s')} ({swaps['swap_outs']} swap-outs, {gib(swaps['swap_out_bytes'])}) |",
          f"| swap-in bandwidth | {fmt(rep['swap_in_gbps'], ' GB/s')} ({swaps['swap_ins']} swap-ins, {gib(swaps['swap_in_bytes'])}) |",
          f"| resume (swap-in) time | mean {fmt(rep['resume_ms']['mean'], ' ms')}, max {fmt(rep['resume_ms']['max'], ' ms')} |",
          f"| allocations that waited for memory | {swaps['mem_waits']} |",
          f"| mismatches / OOMs | {mismatches} / {ooms} |",
          f"| GPU memory used, max (nvidia-smi) | {fmt(rep['gpu_mem_used_max_mib'], ' MiB')} of {total // 2**20} MiB |",
          "", "| tenant | exit | iterations | mismatches | OOMs | pauses | max gap s | swap-outs | swap-ins | passed |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for t in tenants:
        r, d = t["result"], t["daemon"] or {}
        md.append(f"| {t['name']} | {fmt(t['exit_code'])} | {fmt(r.get('iterations'))} | {fmt(r.get('mismatches'))} | "
                  f"{fmt(r.get('ooms'))} | {fmt(r.get('pauses'))} | {fmt(r.get('max_gap_s'))} | "
                  f"{fmt(d.get('swap_outs'))} | {fmt(d.get('swap_ins'))} | {r.get('passed') is True} |")
    if failures:
        md += ["", "Failed checks: " + ", ".join(failures)]
    for r in reasons:
        md.append("- " + r)
    for t in tenants:
        if t["result"].get("error"):
            md.append(f"- {t['name']}: {t['result']['error']}")
    text = "\n".join(md) + "\n"
    with open(os.path.join(out, "swap.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if rep["passed"] else 1


try:
    sys.exit(main())
except Exception as e:  # never leave without a swap.json
    import traceback
    traceback.print_exc()
    with open(os.path.join(out, "swap.json"), "w") as f:
        json.dump({"test": "swap", "passed": False, "error": "report failed: %r" % e}, f)
    sys.exit(1)
PY
  local rc=$?
  if [[ ! -s $OUT/swap.json ]]; then
    printf '{"test":"swap","passed":false,"error":"report did not run (python3 missing or timed out), exit %d"}\n' \
      "$rc" >"$OUT/swap.json"
    rc=1
  fi
  return "$rc"
}

# --- 0. the machine ---------------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi >"$LOGS/swap-nvidia-smi.txt" 2>&1
  q=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  if [[ -n $q ]]; then
    IFS=',' read -r GPU_NAME DRIVER GPU_TOTAL_MIB <<<"$q"
    GPU_NAME=$(echo "$GPU_NAME" | sed 's/^ *//; s/ *$//')
    DRIVER=$(echo "$DRIVER" | tr -d ' ')
    GPU_TOTAL_MIB=$(echo "$GPU_TOTAL_MIB" | tr -dc '0-9')
    [[ -n $GPU_TOTAL_MIB ]] || GPU_TOTAL_MIB=0
  fi
else
  log "nvidia-smi not found"
fi
log "GPU: $GPU_NAME, driver $DRIVER, ${GPU_TOTAL_MIB} MiB"
log "tenants: 2 x ${GIB} GiB (quota ${MEM_MIB} MiB), ${SECONDS_PER_TENANT} s each; pool '${SWAP_POOL}', quantum ${SWAP_QUANTUM_MS} ms"
for f in "$GPUOS" "$GPUOSD" "$BUILD/lib/libgpuos.so"; do
  [[ -e $f ]] || reason "missing $f (the build tree must be at $BUILD)"
done

# --- 1. config, memory logger, daemon ---------------------------------------------------------------
{
  echo '[daemon]'
  echo "log_level = \"${LOG_LEVEL:-info}\""
  echo 'history = 64'
  echo '[tenants]'
  echo 'on_no_daemon = "refuse"   # a tenant that cannot register must fail, not run ungoverned'
  if [[ -n $SWAP_POLICY ]]; then
    echo '[scheduler]'
    echo "policy = \"$SWAP_POLICY\""
  fi
  echo '[metrics]'
  echo 'listen = ""               # private daemon: leave the metrics port alone'
  echo '[memory]'
  echo "swap_pool = \"$SWAP_POOL\""
  echo "swap_quantum_ms = $SWAP_QUANTUM_MS"
  [[ -n $SWAP_HEADROOM ]] && echo "swap_headroom = \"$SWAP_HEADROOM\""
} >"$CFG"
cp "$CFG" "$LOGS/swap-gpuos.toml"
timeout 20 "$GPUOS" config check "$CFG" >"$LOGS/swap-config_check.txt" 2>&1
echo "exit $?" >>"$LOGS/swap-config_check.txt"

# nvidia-smi memory every 2 s (ends by itself when this script is gone or $W/stop-smi exists).
SMI_PID=
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "timestamp, index, memory.used [MiB], memory.total [MiB], utilization.gpu [%]" >"$LOGS/nvidia-smi-mem.csv"
  echo "timestamp, pid, process_name, used_memory [MiB]" >"$LOGS/nvidia-smi-apps.csv"
  (
    parent=$$
    while kill -0 "$parent" 2>/dev/null && [[ ! -e $W/stop-smi ]]; do
      timeout 10 nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total,utilization.gpu \
        --format=csv,noheader,nounits >>"$LOGS/nvidia-smi-mem.csv" 2>/dev/null
      ts=$(date '+%Y/%m/%d %H:%M:%S.%3N')
      timeout 10 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits \
        2>/dev/null | sed "s|^|$ts, |" >>"$LOGS/nvidia-smi-apps.csv"
      sleep 2
    done
  ) </dev/null >/dev/null 2>&1 &
  SMI_PID=$!
fi

source gpu/lib/gpuosd.sh
stop_all() {
  # Stops only what this script started, by pid. Writes $W/daemon_status.json once.
  if [[ -n $SMI_PID ]]; then
    touch "$W/stop-smi"
    kill "$SMI_PID" 2>/dev/null
    wait "$SMI_PID" 2>/dev/null
    SMI_PID=
  fi
  for p in ${TPIDS:-}; do kill -TERM "$p" 2>/dev/null; done
  gpuosd_stop 30 "$W/daemon_status.json"
}
on_signal() {
  reason "interrupted by a signal"
  trap - INT TERM
  stop_all
  [[ ${REPORTED:-0} -eq 1 ]] || report
  exit 130
}
trap stop_all EXIT
trap on_signal INT TERM

if [[ -x $GPUOSD ]]; then
  log "starting gpuosd --config $CFG --socket $SOCK"
  gpuosd_start "$GPUOS" "$SOCK" "$LOGS/swap-gpuosd.log" "$GPUOSD" --config "$CFG" --socket "$SOCK"
  gpuosd_wait 30 && daemon_started=1
fi
if [[ $daemon_started -eq 1 ]]; then
  log "gpuosd is up (pid $GPUOSD_PID)"
  timeout 10 "$GPUOS" ps --json --socket "$SOCK" >"$LOGS/swap-ps_start.json" 2>&1
else
  reason "gpuosd did not start: $(tail -3 "$LOGS/swap-gpuosd.log" 2>/dev/null | tr '\n' ' ' | cut -c1-400)"
fi

# --- 2. the tenants -----------------------------------------------------------------------------------
TPIDS=
LAST_PID=
# start_tenant NAME SEED LIMIT_S: starts a tenant in the background; its (timeout's) pid in LAST_PID
start_tenant() {
  local name=$1 seed=$2 limit=$3
  local wall=$((limit > 40 ? limit - 20 : limit / 2))  # the tenant's watchdog reports before timeout kills
  # shellcheck disable=SC2086  # EXTRA_TENANT_ARGS is a word list on purpose
  timeout -k 15 "$limit" "$GPUOS" run --swap --mem "${MEM_MIB}MiB" --name "$name" --socket "$SOCK" -- \
    "$PY" gpu/tests/torch_swap.py --gib "$GIB" --seconds "$SECONDS_PER_TENANT" --chunk-mib "$CHUNK_MIB" \
    --seed "$seed" --name "$name" --json "$W/$name.json" --max-wall-s "$wall" --barrier-dir "$W/barrier" $EXTRA_TENANT_ARGS \
    </dev/null >"$LOGS/$name.out" 2>"$LOGS/$name.err" &
  LAST_PID=$!
  TPIDS="$TPIDS $LAST_PID"
  log "started $name (limit ${limit}s)"
}

if [[ $daemon_started -eq 1 ]]; then
  t0=$(date +%s)
  deadline=$((t0 + TENANT_TIMEOUT))
  start_tenant swap-a 1 "$TENANT_TIMEOUT"
  PID_swap_a=$LAST_PID
  # The second tenant arrives once the first holds its memory, so it must wait for a swap-out.
  for _ in $(seq 1 $((READY_TIMEOUT * 2))); do
    grep -q '] ready:' "$LOGS/swap-a.err" 2>/dev/null && break
    kill -0 "$PID_swap_a" 2>/dev/null || break
    sleep 0.5
  done
  if grep -q '] ready:' "$LOGS/swap-a.err" 2>/dev/null; then
    log "swap-a is set up after $(($(date +%s) - t0)) s"
  else
    log "swap-a not ready after $(($(date +%s) - t0)) s; starting swap-b anyway"
  fi
  limit_b=$((deadline - $(date +%s)))
  ((limit_b < 60)) && limit_b=60
  start_tenant swap-b 2 "$limit_b"
  PID_swap_b=$LAST_PID
  wait "$PID_swap_a"
  echo $? >"$W/rc-swap-a"
  log "swap-a exited $(cat "$W/rc-swap-a")"
  wait "$PID_swap_b"
  echo $? >"$W/rc-swap-b"
  log "swap-b exited $(cat "$W/rc-swap-b")"
  TPIDS=

  # The daemon's final counters: wait (10 s at most) until it lists both as exited.
  for _ in $(seq 1 20); do
    timeout 10 "$GPUOS" ps --json --all --socket "$SOCK" >"$W/ps_all.json" 2>"$W/ps_all.err"
    n=$(grep -o '"state" *: *"exited"' "$W/ps_all.json" 2>/dev/null | wc -l)
    ((n >= 2)) && break
    sleep 0.5
  done
  cp "$W/ps_all.json" "$LOGS/swap-ps_all.json" 2>/dev/null
  if ! gpuosd_alive; then
    reason "gpuosd died during the test: $(tail -3 "$LOGS/swap-gpuosd.log" | tr '\n' ' ' | cut -c1-400)"
  fi
fi

stop_all
cp "$W/daemon_status.json" "$LOGS/swap-daemon_status.json" 2>/dev/null
for n in swap-a swap-b; do cp "$W/$n.json" "$LOGS/result-$n.json" 2>/dev/null; done
log "took $(($(date +%s) - t_script)) s; writing $OUT/swap.json"

# --- 3. report ----------------------------------------------------------------------------------------
report
exit $?
