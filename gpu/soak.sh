#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak: 8 tenants on one GPU for minutes under the priority policy: no leak, no deadlock, exact counts.
#
#   OUT=/results MINUTES=3 bash gpu/soak.sh          (repo root; build tree at ./build or GPUOS_BUILD_DIR)
#
# Starts a private gpuosd ([scheduler] policy = "priority", metrics off) and 8 gpuos-synth tenants
# (2 guaranteed with gaps, 6 best-effort closed loops of different weights; fixed-work kernels from
# ~10 us to ~10 ms, one tenant also fills and verifies 256 MiB). gpuos-synth runs --count kernels, so
# each gets more than it can finish and is stopped with SIGTERM after MINUTES (it then finishes its
# kernel, verifies and reports launches_issued). Every SAMPLE_S (5 s) it records gpuosd's VmRSS, its
# open fds and how long `gpuos ps --json` takes (10 s timeout: a hung daemon shows as a timeout).
# Checked at the end:
#   - every tenant exited 0 with "verified": true;
#   - the launches gpuosd counted per tenant (ps --json --all) == launches_issued of gpuos-synth;
#   - every `gpuos ps` answered, gpuosd answers at the end and stops cleanly on SIGTERM (exit 0);
#   - no tenant is left registered;
#   - VmRSS growth from the first sample with all tenants running (after one more interval) to the
#     last sample (after they exited) < RSS_GROWTH_MAX_KIB (2048);
#   - gpuosd's fd count is back at its value before the tenants started.
# Then, if valgrind is installed (VALGRIND=auto; 0 skips, 1 requires it), a shorter phase
# (VALGRIND_MINUTES=1, 8 tenants) with gpuosd under valgrind memcheck --leak-check=full
# --error-exitcode=9, reporting definitely-lost bytes (in total, and those whose allocation site is in
# gpuos rather than in the CUDA driver, which is what must be 0). If gpuosd does not come up under
# valgrind within 120 s, or must be killed before its leak check ends (60 s after SIGTERM) -- real
# libcuda can be very slow or unhappy under memcheck -- that phase is "inconclusive" and does not
# fail the run. The valgrind phase is also skipped when less than it needs is left of SOAK_BUDGET_S
# (default 570: one 10-minute device call).
#
# Other settings: SAMPLE_S=5, GPUOS_DOUBLE=1 (run on the driver test double from the build tree: no
# GPU needed; for trying the script out), PS_TIMEOUT_S=10.
# Writes $OUT/soak.json and $OUT/soak.md (always); logs under $OUT/logs/soak/. Exit 0 iff passed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$(pwd)
if [[ -z ${OUT:-} ]]; then
  echo "soak.sh: set OUT to the results directory" >&2
  exit 2
fi
mkdir -p "$OUT/logs/soak" || exit 2
OUT=$(cd "$OUT" && pwd)
LOGS=$OUT/logs/soak

BUILD=${GPUOS_BUILD_DIR:-build}
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
GPUOS=$BUILD/bin/gpuos
GPUOSD=${GPUOSD:-$BUILD/bin/gpuosd}  # e.g. an ASan build for the leak check
SYNTH=$BUILD/bin/gpuos-synth
MINUTES=${MINUTES:-3}
VALGRIND=${VALGRIND:-auto}
VALGRIND_MINUTES=${VALGRIND_MINUTES:-1}
SAMPLE_S=${SAMPLE_S:-5}
PS_TIMEOUT_S=${PS_TIMEOUT_S:-10}
RSS_GROWTH_MAX_KIB=${RSS_GROWTH_MAX_KIB:-2048}
SOAK_BUDGET_S=${SOAK_BUDGET_S:-570}
GPUOS_DOUBLE=${GPUOS_DOUBLE:-0}
SOAK_S=$(awk -v m="$MINUTES" 'BEGIN { s = int(m * 60 + 0.5); print (s < 10 ? 10 : s) }')
VG_S=$(awk -v m="$VALGRIND_MINUTES" 'BEGIN { s = int(m * 60 + 0.5); print (s < 10 ? 10 : s) }')

W=/tmp/gpuos-soak
SOCK=$W/gpuosd.sock
CFG=$W/gpuos.toml
export GPUOS_SOCKET=$SOCK
export GPUOS_CONFIG=$CFG
unset LD_PRELOAD
if [[ $GPUOS_DOUBLE = 1 ]]; then
  export GPUOS_DRIVER_LIBRARY=$BUILD/lib/driver_double/libcuda.so.1
  export LD_LIBRARY_PATH=$BUILD/lib/driver_double${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export GPUOS_SIM_SHM=/gpuos-soak-$$
fi

log() { printf '[soak %s] %s\n' "$(date +%T)" "$*"; }
t_script=$(date +%s)
rm -rf "$W"
mkdir -p "$W" || exit 2
rm -f "$OUT/soak.json" "$OUT/soak.md"

# The tenants: name class weight iters blocks-per-sm gap-us mem-mib
#   (H200 times: 125000 iters x 8 blocks/SM ~ 1.4 ms; time grows with iters x blocks/SM)
TENANTS=(
  "g0 guaranteed 100 125000 8 2000 0"
  "g1 guaranteed 100 20000 4 500 0"
  "b2 best-effort 100 2000 1 0 0"
  "b3 best-effort 200 50000 2 0 0"
  "b4 best-effort 50 400000 8 0 0"
  "b5 best-effort 100 1000000 8 0 0"
  "b6 best-effort 100 10000 2 100 256"
  "b7 best-effort 300 200000 1 0 0"
)
NT=${#TENANTS[@]}

GPU_NAME=unknown
DRIVER=unknown
if [[ $GPUOS_DOUBLE = 1 ]]; then
  GPU_NAME="driver test double"
  DRIVER=none
elif command -v nvidia-smi >/dev/null 2>&1; then
  q=$(timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
  if [[ -n $q ]]; then
    GPU_NAME=${q%%,*}
    DRIVER=${q##*, }
  fi
  timeout 30 nvidia-smi >"$LOGS/nvidia-smi.txt" 2>&1
fi

# report: writes soak.json and soak.md from $W (defined first so an interrupted run reports too).
REPORTED=0
report() {
  REPORTED=1
  R_W=$W R_OUT=$OUT R_GPU=$GPU_NAME R_DRIVER=$DRIVER R_MINUTES=$MINUTES R_SOAK_S=$SOAK_S R_NT=$NT \
  R_RSS_MAX=$RSS_GROWTH_MAX_KIB R_VALGRIND=$VALGRIND R_DOUBLE=$GPUOS_DOUBLE R_PS_TIMEOUT=$PS_TIMEOUT_S \
  timeout 60 python3 - <<'PY'
import glob, json, os, re, sys, time

E = os.environ
w, out = E["R_W"], E["R_OUT"]


def num(x, kind=float, default=None):
    try:
        return kind(x)
    except (TypeError, ValueError):
        return default


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def load_json(path):
    try:
        return json.loads(read(path).strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def kv(path):
    d = {}
    for line in read(path).splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            d[k.strip()] = v.strip()
    return d


def pct(vals, p):
    if not vals:
        return None
    s = sorted(vals)
    return s[min(len(s) - 1, max(0, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


def valgrind_leaks(text):
    """(definitely lost total, definitely lost with a gpuos allocation site, records, errors)."""
    total = 0
    m = re.search(r"definitely lost: ([\d,]+) bytes in ([\d,]+) blocks", text)
    if m:
        total = int(m.group(1).replace(",", ""))
    m = re.search(r"ERROR SUMMARY: ([\d,]+) errors", text)
    errors = int(m.group(1).replace(",", "")) if m else None
    ours, records = 0, []
    lines = [re.sub(r"^==\d+==\s?", "", l) for l in text.splitlines()]
    i = 0
    alloc = re.compile(r"vg_replace_malloc|operator new|\bmalloc\b|\bcalloc\b|\brealloc\b|strdup|memalign")
    while i < len(lines):
        m = re.match(r"\s*([\d,]+) (?:\(([\d,]+) direct, [\d,]+ indirect\) )?bytes in [\d,]+ blocks are definitely lost",
                     lines[i])
        if not m:
            i += 1
            continue
        nbytes = int((m.group(2) or m.group(1)).replace(",", ""))  # direct bytes, as in the LEAK SUMMARY
        frames = []
        i += 1
        while i < len(lines) and re.match(r"\s+(at|by) ", lines[i]):
            frames.append(lines[i].strip())
            i += 1
        site = next((f for f in frames if not alloc.search(f)), frames[-1] if frames else "")
        driver = bool(re.search(r"libcuda|libnvidia|libcudart", site))
        if not driver:
            ours += nbytes
        records.append({"bytes": nbytes, "site": site[:200], "in_driver": driver, "stack": frames[:8]})
    return total, ours, records, errors


def phase(name):
    d = os.path.join(w, name)
    if not os.path.isdir(d):
        return None
    info = kv(os.path.join(d, "phase.txt"))
    ph = {"name": name, "ran": True, "seconds": num(info.get("seconds"), int),
          "daemon_started": info.get("daemon_started") == "1", "notes": [l for l in read(os.path.join(d, "notes.txt")).splitlines() if l]}
    # Samples: t_s phase rss_kib fds ps_ms ps_rc live launches
    samples = []
    for line in read(os.path.join(d, "samples.tsv")).splitlines():
        p = line.split("\t")
        if len(p) >= 8 and p[0] != "t_s":
            samples.append({"t_s": num(p[0]), "phase": p[1], "rss_kib": num(p[2], int), "fds": num(p[3], int),
                            "ps_ms": num(p[4]), "ps_rc": num(p[5], int), "live": num(p[6], int),
                            "launches": num(p[7], int)})
    pre = [s for s in samples if s["phase"] == "pre"]
    run = [s for s in samples if s["phase"] == "run"]
    post = [s for s in samples if s["phase"] == "post"]
    nt = int(E["R_NT"])
    full = [s for s in run if s["live"] == nt]
    start = full[1] if len(full) > 1 else (full[0] if full else (run[0] if run else None))
    end = post[-1] if post else (samples[-1] if samples else None)
    lat = [s["ps_ms"] for s in samples if s["ps_ms"] is not None and s["ps_rc"] == 0]
    ps_failed = [s for s in samples if s["ps_rc"] != 0]
    ph.update(
        samples=len(samples),
        rss_pre_kib=pre[-1]["rss_kib"] if pre else None,
        rss_start_kib=start["rss_kib"] if start else None, rss_start_t_s=start["t_s"] if start else None,
        rss_end_kib=end["rss_kib"] if end else None, rss_end_t_s=end["t_s"] if end else None,
        rss_max_kib=max([s["rss_kib"] for s in samples if s["rss_kib"] is not None] or [0]) or None,
        rss_last_running_kib=run[-1]["rss_kib"] if run else None,
        fds_pre=pre[-1]["fds"] if pre else None, fds_max=max([s["fds"] for s in samples if s["fds"] is not None] or [0]) or None,
        fds_end=end["fds"] if end else None,
        ps_calls=len(samples), ps_failed=len(ps_failed),
        ps_p50_ms=round(pct(lat, 50), 1) if lat else None, ps_max_ms=round(max(lat), 1) if lat else None,
        max_live=max([s["live"] or 0 for s in samples] or [0]),
        live_at_end=end["live"] if end else None,
    )
    if ph["rss_start_kib"] is not None and ph["rss_end_kib"] is not None:
        ph["rss_growth_kib"] = ph["rss_end_kib"] - ph["rss_start_kib"]
    else:
        ph["rss_growth_kib"] = None
    # Tenants.
    ps_all = load_json(os.path.join(d, "ps_all.json"))
    if ps_all is None:
        try:
            ps_all = json.loads(read(os.path.join(d, "ps_all.json")))
        except ValueError:
            ps_all = None
    recs = ps_all.get("tenants", []) if isinstance(ps_all, dict) else []
    tenants, total_issued = [], 0
    for line in read(os.path.join(d, "tenants.tsv")).splitlines():
        p = line.split("\t")
        if len(p) < 2:
            continue
        tname, tclass = p[0], p[1]
        rc = None
        try:
            rc = int(read(os.path.join(d, "rc-" + tname)).strip())
        except ValueError:
            pass
        res = load_json(os.path.join(d, tname + ".json")) or {}
        mine = [r for r in recs if r.get("name") == tname]
        rec = max(mine, key=lambda r: num(r.get("id"), int, 0)) if mine else None
        issued = num(res.get("launches_issued"), int)
        counted = num(rec.get("launches"), int) if rec else None
        total_issued += issued or 0
        tenants.append({"name": tname, "class": tclass, "exit_code": rc, "verified": res.get("verified"),
                        "launches_issued": issued, "launches_counted": counted,
                        "kernels": res.get("kernels"), "p50_us": res.get("p50_us"), "p99_us": res.get("p99_us"),
                        "throughput_per_s": res.get("throughput_per_s"),
                        "state": rec.get("state") if rec else None,
                        "gate_waits": rec.get("gate_waits") if rec else None,
                        "mem_used_bytes_at_exit": rec.get("mem_used_bytes") if rec else None,
                        "stderr_tail": read(os.path.join(d, tname + ".err"))[-300:] if rc != 0 else ""})
    ph["tenants"] = tenants
    ph["launches_total"] = total_issued
    run_s = num(info.get("run_s"), float)
    ph["run_s"] = run_s
    ph["launches_per_s"] = round(total_issued / run_s, 1) if run_s else None
    ds = load_json(os.path.join(d, "daemon_status.json")) or {}
    ph["daemon"] = ds
    ph["final_ps_ok"] = info.get("final_ps_ok") == "1"
    log = read(os.path.join(d, "gpuosd.log"))
    ph["daemon_log_errors"] = sum(1 for l in log.splitlines() if re.search(r"\berror\b", l, re.I))
    vg = name == "valgrind"
    checks = {"daemon_started": ph["daemon_started"]}
    if ph["daemon_started"]:
        checks["all_tenants_registered"] = ph["max_live"] == nt
        checks["all_exit_0_verified"] = len(tenants) == nt and all(t["exit_code"] == 0 and t["verified"] is True for t in tenants)
        checks["counts_equal"] = len(tenants) == nt and all(
            t["launches_issued"] is not None and t["launches_issued"] == t["launches_counted"] for t in tenants)
        checks["all_seen_exited"] = len(tenants) == nt and all(t["state"] == "exited" for t in tenants)
        checks["every_ps_answered"] = not ps_failed and ph["samples"] > 0
        checks["answers_at_end"] = ph["final_ps_ok"]
        checks["none_left_registered"] = ph["live_at_end"] == 0
        if not vg:
            checks["stopped_cleanly"] = bool(ds.get("stopped_cleanly")) and ds.get("exit_status") == 0
            checks["rss_growth_below_limit"] = ph["rss_growth_kib"] is not None and ph["rss_growth_kib"] < int(E["R_RSS_MAX"])
            checks["fds_back_to_start"] = ph["fds_pre"] is not None and ph["fds_end"] == ph["fds_pre"]
    if vg:
        text = read(os.path.join(d, "valgrind.log"))
        total, ours, records, errors = valgrind_leaks(text)
        ph.update(valgrind_exit=ds.get("exit_status"), definitely_lost_bytes=total if text else None,
                  definitely_lost_bytes_gpuos=ours if text else None, valgrind_errors=errors,
                  leak_records=records[:20], leak_summary_found="LEAK SUMMARY" in text or "All heap blocks were freed" in text)
        if ph["daemon_started"]:
            checks["leak_summary_written"] = ph["leak_summary_found"]
            checks["no_definite_leak_in_gpuos"] = ph["leak_summary_found"] and ours == 0
    ph["checks"] = checks
    ph["failures"] = [k for k, ok in checks.items() if not ok]
    killed = ds.get("stopped_by") == "SIGKILL"
    if vg and (not ph["daemon_started"] or (killed and not ph.get("leak_summary_found"))):
        # valgrind's own trouble (real libcuda under memcheck): no verdict on gpuos
        ph["notes"].append("gpuosd under valgrind did not start" if not ph["daemon_started"]
                           else "gpuosd under valgrind had to be killed before its leak check finished")
        ph["verdict"] = "inconclusive"
        ph["passed"] = None
    else:
        ph["passed"] = not ph["failures"]
        ph["verdict"] = "passed" if ph["passed"] else "failed"
    return ph


def main():
    main_ph = phase("main") or {"name": "main", "ran": False, "passed": False, "failures": ["did not run"], "checks": {}}
    vg = phase("valgrind")
    skip = read(os.path.join(w, "valgrind_skipped.txt")).strip()
    if vg is None:
        vg = {"name": "valgrind", "ran": False, "passed": None, "verdict": "skipped", "why": skip or "not run"}
        if E.get("R_VALGRIND") == "1":
            vg.update(passed=False, verdict="failed", why=(skip or "not run") + " (VALGRIND=1 requires it)")
    passed = main_ph.get("passed") is True and vg.get("passed") is not False
    rep = {"test": "soak", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "gpu": E.get("R_GPU"),
           "driver": E.get("R_DRIVER"), "simulated": E.get("R_DOUBLE") == "1",
           "tenants": int(E["R_NT"]), "minutes": num(E.get("R_MINUTES")),
           "launches_total": main_ph.get("launches_total"), "launches_per_s": main_ph.get("launches_per_s"),
           "rss_start_kib": main_ph.get("rss_start_kib"), "rss_end_kib": main_ph.get("rss_end_kib"),
           "rss_growth_kib": main_ph.get("rss_growth_kib"), "rss_growth_limit_kib": int(E["R_RSS_MAX"]),
           "fds_pre": main_ph.get("fds_pre"), "fds_max": main_ph.get("fds_max"), "fds_end": main_ph.get("fds_end"),
           "ps_p50_ms": main_ph.get("ps_p50_ms"), "ps_max_ms": main_ph.get("ps_max_ms"),
           "ps_calls": main_ph.get("ps_calls"), "ps_failed": main_ph.get("ps_failed"),
           "valgrind_definitely_lost_bytes": vg.get("definitely_lost_bytes"),
           "valgrind_definitely_lost_bytes_gpuos": vg.get("definitely_lost_bytes_gpuos"),
           "passed": passed, "phases": {"main": main_ph, "valgrind": vg},
           "failures": ["main:" + f for f in main_ph.get("failures", [])] + ["valgrind:" + f for f in vg.get("failures", [])
                                                                              if vg.get("passed") is False]}
    with open(os.path.join(out, "soak.json"), "w") as f:
        json.dump(rep, f, indent=1)
        f.write("\n")

    def fmt(v, unit=""):
        return "-" if v is None else f"{v}{unit}"

    md = [f"# gpuos soak: {'PASSED' if passed else 'FAILED'}", "",
          f"{rep['date']} · {rep['gpu']} · driver {rep['driver']} · {rep['tenants']} tenants (2 guaranteed, "
          f"{rep['tenants'] - 2} best-effort), priority policy, {fmt(rep['minutes'])} min", "",
          "| figure | value |", "|---|---|",
          f"| launches (all tenants) | {fmt(rep['launches_total'])} ({fmt(rep['launches_per_s'])}/s) |",
          f"| gpuosd VmRSS start → end | {fmt(rep['rss_start_kib'])} → {fmt(rep['rss_end_kib'])} KiB "
          f"(growth {fmt(rep['rss_growth_kib'])} KiB, limit {rep['rss_growth_limit_kib']}) |",
          f"| gpuosd fds before → max → after | {fmt(rep['fds_pre'])} → {fmt(rep['fds_max'])} → {fmt(rep['fds_end'])} |",
          f"| `gpuos ps` latency p50 / max | {fmt(rep['ps_p50_ms'])} / {fmt(rep['ps_max_ms'])} ms "
          f"({fmt(rep['ps_calls'])} calls, {fmt(rep['ps_failed'])} failed) |",
          f"| valgrind (gpuosd, {vg.get('seconds') or '-'} s) | {vg.get('verdict')}"
          + (f": definitely lost {fmt(vg.get('definitely_lost_bytes'))} B, of which in gpuos "
             f"{fmt(vg.get('definitely_lost_bytes_gpuos'))} B; {fmt(vg.get('valgrind_errors'))} errors; exit {fmt(vg.get('valgrind_exit'))}"
             if vg.get("ran") else f" ({vg.get('why', '')})") + " |",
          "", "| tenant | class | exit | verified | issued | counted by gpuosd | p50 us | p99 us |", "|---|---|---|---|---|---|---|---|"]
    for t in main_ph.get("tenants", []):
        md.append(f"| {t['name']} | {t['class']} | {fmt(t['exit_code'])} | {t['verified']} | {fmt(t['launches_issued'])} | "
                  f"{fmt(t['launches_counted'])} | {fmt(t['p50_us'])} | {fmt(t['p99_us'])} |")
    if rep["failures"]:
        md += ["", "Failed checks: " + ", ".join(rep["failures"])]
    for ph in (main_ph, vg):
        for n in ph.get("notes", []):
            md.append(f"- {ph['name']}: {n}")
    text = "\n".join(md) + "\n"
    with open(os.path.join(out, "soak.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if passed else 1


try:
    sys.exit(main())
except Exception as e:  # never leave without a soak.json
    import traceback
    traceback.print_exc()
    with open(os.path.join(out, "soak.json"), "w") as f:
        json.dump({"test": "soak", "passed": False, "error": "report failed: %r" % e}, f)
    sys.exit(1)
PY
  local rc=$?
  if [[ ! -s $OUT/soak.json ]]; then
    printf '{"test":"soak","passed":false,"error":"report did not run (python3 missing or timed out), exit %d"}\n' \
      "$rc" >"$OUT/soak.json"
    rc=1
  fi
  return "$rc"
}

# --- the daemon -----------------------------------------------------------------------------------------
{
  echo '[daemon]'
  echo 'log_level = "info"'
  echo 'history = 64'
  echo '[tenants]'
  echo 'on_no_daemon = "refuse"   # a tenant that cannot register must fail, not run ungoverned'
  echo '[scheduler]'
  echo 'policy = "priority"'
  echo '[metrics]'
  echo 'listen = ""               # private daemon: leave the metrics port alone'
} >"$CFG"
cp "$CFG" "$LOGS/gpuos.toml"

source gpu/lib/gpuosd.sh
GPUOSD_PS_TIMEOUT_S=$PS_TIMEOUT_S
TPIDS=
PHASE_DIR=
# stop_daemon GRACE_S: SIGTERM, then SIGKILL after GRACE_S; writes $PHASE_DIR/daemon_status.json.
stop_daemon() { gpuosd_stop "${1:-20}" "$PHASE_DIR/daemon_status.json"; }
cleanup() {
  local p
  for p in $TPIDS; do kill -TERM "$p" 2>/dev/null; done
  stop_daemon 5
  [[ $GPUOS_DOUBLE = 1 ]] && rm -f "/dev/shm/gpuos-soak-$$"
  return 0
}
on_signal() {
  trap - INT TERM
  [[ -n $PHASE_DIR ]] && echo "interrupted by a signal" >>"$PHASE_DIR/notes.txt"
  cleanup
  [[ $REPORTED -eq 1 ]] || report
  exit 130
}
trap cleanup EXIT
trap on_signal INT TERM

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true; }
fd_count() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }

T0=0
# sample PHASE: one line of samples.tsv (t_s phase rss_kib fds ps_ms ps_rc live launches); keeps the ps
# output as $PHASE_DIR/ps/NNNN.json. Sets LIVE.
LIVE=0
NSAMPLE=0
sample() {
  local ph=$1 rss fds t0 t1 rc launches f
  rss=$(rss_kib "$GPUOSD_PID")
  fds=$(fd_count "$GPUOSD_PID")
  NSAMPLE=$((NSAMPLE + 1))
  f=$PHASE_DIR/ps/$(printf '%04d' "$NSAMPLE").json
  t0=$(date +%s%N)
  timeout "$PS_TIMEOUT_S" "$GPUOS" ps --json --socket "$SOCK" >"$f" 2>&1
  rc=$?
  t1=$(date +%s%N)
  if [[ $rc -eq 0 ]]; then
    LIVE=$(grep -o '"state" *: *"' "$f" | wc -l)
    launches=$(grep -o '"launches" *: *[0-9]*' "$f" | awk -F: '{ s += $2 } END { print s + 0 }')
  else
    LIVE=-1
    launches=-1
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(($(date +%s) - T0))" "$ph" "${rss:--1}" "${fds:--1}" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1e6 }')" "$rc" "$LIVE" "$launches" \
    >>"$PHASE_DIR/samples.tsv"
}

# run_phase NAME SECONDS START_TIMEOUT_S [PREFIX...]: daemon (under PREFIX), 8 tenants for SECONDS.
run_phase() {
  local name=$1 secs=$2 start_timeout=$3
  shift 3
  PHASE_DIR=$W/$name
  mkdir -p "$PHASE_DIR/ps"
  : >"$PHASE_DIR/notes.txt"
  : >"$PHASE_DIR/tenants.tsv"
  printf 't_s\tphase\trss_kib\tfds\tps_ms\tps_rc\tlive\tlaunches\n' >"$PHASE_DIR/samples.tsv"
  NSAMPLE=0
  T0=$(date +%s)
  log "phase $name: starting gpuosd${*:+ under $1} (policy priority)"
  # Under valgrind, valgrind becomes gpuosd's process: GPUOSD_PID is gpuosd either way.
  gpuosd_start "$GPUOS" "$SOCK" "$PHASE_DIR/gpuosd.log" "$@" "$GPUOSD" --config "$CFG" --socket "$SOCK"
  gpuosd_wait "$start_timeout"
  if [[ $GPUOSD_STARTED -ne 1 ]]; then
    echo "gpuosd did not answer within ${start_timeout}s: $(tail -3 "$PHASE_DIR/gpuosd.log" | tr '\n' ' ' | cut -c1-300)" \
      >>"$PHASE_DIR/notes.txt"
    log "phase $name: gpuosd did not start"
    stop_daemon 10
    printf 'seconds=%s\ndaemon_started=0\n' "$secs" >"$PHASE_DIR/phase.txt"
    return 1
  fi
  log "phase $name: gpuosd is up (pid $GPUOSD_PID) after $(($(date +%s) - T0)) s"
  printf 'seconds=%s\ndaemon_started=1\n' "$secs" >"$PHASE_DIR/phase.txt"
  sleep 1
  sample pre
  sleep 1
  sample pre

  # Tenants: generous --count (stopped by SIGTERM at the deadline); hard limit secs + 120 s.
  local count=$((secs * 50000 + 1000)) limit=$((secs + 120)) spec tname tclass weight iters bps gap mem extra pids=()
  TPIDS=
  for spec in "${TENANTS[@]}"; do
    read -r tname tclass weight iters bps gap mem <<<"$spec"
    extra=()
    ((mem > 0)) && extra=(--mem-mib "$mem")
    printf '%s\t%s\n' "$tname" "$tclass" >>"$PHASE_DIR/tenants.tsv"
    timeout -k 15 "$limit" "$GPUOS" run --name "$tname" --class "$tclass" --weight "$weight" --socket "$SOCK" -- \
      "$SYNTH" --name "$tname" --iters "$iters" --blocks-per-sm "$bps" --gap-us "$gap" --count "$count" \
      --warmup 2 "${extra[@]}" --json "$PHASE_DIR/$tname.json" \
      </dev/null >"$PHASE_DIR/$tname.out" 2>"$PHASE_DIR/$tname.err" &
    pids+=($!)
    TPIDS="$TPIDS $!"
    sleep 0.2
  done
  local t_run deadline alive p i
  t_run=$(date +%s)
  deadline=$((t_run + secs))
  log "phase $name: $NT tenants started; running ${secs}s"
  while (($(date +%s) < deadline)); do
    sleep "$(awk -v d=$((deadline - $(date +%s))) -v s="$SAMPLE_S" 'BEGIN { print (d < s ? (d > 0 ? d : 0) : s) }')"
    sample run
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    if ((alive == 0 && $(date +%s) < deadline)); then
      echo "all tenants ended before the deadline ($(($(date +%s) - t_run)) s of ${secs}s)" >>"$PHASE_DIR/notes.txt"
      break
    fi
  done
  local run_s=$(($(date +%s) - t_run))
  log "phase $name: stopping the tenants (SIGTERM)"
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  i=0
  for spec in "${TENANTS[@]}"; do
    read -r tname _ <<<"$spec"
    wait "${pids[$i]}"
    echo $? >"$PHASE_DIR/rc-$tname"
    i=$((i + 1))
  done
  TPIDS=
  log "phase $name: exit codes: $(for spec in "${TENANTS[@]}"; do read -r tname _ <<<"$spec"; printf '%s=%s ' "$tname" "$(cat "$PHASE_DIR/rc-$tname")"; done)"
  # After exit: wait (20 s at most) for no live tenant and the fd count back at its start value.
  local fds_pre
  fds_pre=$(awk -F'\t' '$2 == "pre" { v = $4 } END { print v }' "$PHASE_DIR/samples.tsv")
  for _ in $(seq 1 20); do
    sample post
    [[ $LIVE -eq 0 && $(fd_count "$GPUOSD_PID") == "$fds_pre" ]] && break
    sleep 1
  done
  sleep 1
  sample post
  local final_ok=0
  if timeout "$PS_TIMEOUT_S" "$GPUOS" ps --json --all --socket "$SOCK" >"$PHASE_DIR/ps_all.json" 2>"$PHASE_DIR/ps_all.err"; then
    final_ok=1
  fi
  printf 'seconds=%s\nrun_s=%s\ndaemon_started=1\nfinal_ps_ok=%s\n' "$secs" "$run_s" "$final_ok" >"$PHASE_DIR/phase.txt"
  return 0
}

# --- phase 1: the soak ------------------------------------------------------------------------------------
for f in "$GPUOS" "$GPUOSD" "$SYNTH" "$BUILD/lib/libgpuos.so"; do
  [[ -e $f ]] || log "MISSING: $f (the build tree must be at $BUILD)"
done
log "GPU: $GPU_NAME, driver $DRIVER; $NT tenants for ${SOAK_S}s"
run_phase main "$SOAK_S" 30
stop_daemon 20
cp -r "$W/main" "$LOGS/main" 2>/dev/null

# --- phase 2: gpuosd under valgrind ----------------------------------------------------------------------
if [[ $VALGRIND != 0 ]]; then
  left=$((SOAK_BUDGET_S - ($(date +%s) - t_script)))
  need=$((VG_S + 220))
  if [[ $GPUOSD_STARTED -ne 1 ]]; then
    echo "gpuosd did not start in the main phase" >"$W/valgrind_skipped.txt"
  elif ! command -v valgrind >/dev/null 2>&1; then
    echo "valgrind is not installed" >"$W/valgrind_skipped.txt"
  elif ((left < need)); then
    echo "not enough time left: ${left}s of SOAK_BUDGET_S=${SOAK_BUDGET_S}, the phase may need ${need}s" \
      >"$W/valgrind_skipped.txt"
  else
    run_phase valgrind "$VG_S" 120 valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite \
      --errors-for-leak-kinds=definite --num-callers=30 --error-exitcode=9 --log-file="$W/valgrind/valgrind.log"
    stop_daemon 60
    cp -r "$W/valgrind" "$LOGS/valgrind" 2>/dev/null
  fi
  [[ -s $W/valgrind_skipped.txt ]] && log "valgrind phase skipped: $(cat "$W/valgrind_skipped.txt")"
else
  echo "VALGRIND=0" >"$W/valgrind_skipped.txt"
fi
PHASE_DIR=
log "took $(($(date +%s) - t_script)) s; writing $OUT/soak.json"
report
exit $?
