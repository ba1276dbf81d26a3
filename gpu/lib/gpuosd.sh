# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by every GPU script that runs a private gpuosd: the one way to start it, know it is up, and
# stop it (only the daemon the script started, by its pid).
#
# gpuosd_start CLI SOCKET LOGFILE CMD...
#   Starts CMD (gpuosd, `gpuos daemon`, or either under a prefix such as valgrind) in its own
#   session with stdin from /dev/null and its output to LOGFILE, after removing a stale SOCKET.
#   CMD names the socket itself (--socket SOCKET); CLI is the gpuos CLI the readiness probe asks.
#   Sets GPUOSD_PID (the daemon's pid: this shell has no job control, so the background child is
#   not a process-group leader and setsid(1) calls setsid() without forking), GPUOSD_CLI,
#   GPUOSD_SOCKET, GPUOSD_LOG; GPUOSD_STARTED=0 until gpuosd_wait sees it up.
# gpuosd_start_metrics CLI SOCKET LOGFILE SECONDS CMD...
#   gpuosd_start with CMD --metrics-listen 127.0.0.1:0 (a free port: never the shared default), then
#   gpuosd_wait SECONDS for its metrics line (GPUOSD_PORT).
# gpuosd_wait SECONDS [PROBE...]
#   Polls PROBE (default gpuosd_answers) every 0.1 s for at most SECONDS. Returns 0 (and sets
#   GPUOSD_STARTED=1) once it succeeds, 1 when time is up or the daemon exited first.
# gpuosd_answers: `gpuos ps` answers on the socket (at most GPUOSD_PS_TIMEOUT_S, default 5 s).
# gpuosd_metrics_up: the log says "metrics on ... (port N)"; sets GPUOSD_PORT to N.
# gpuosd_metric NAME: the value of one series (NAME with its labels as exposed) on that port.
# gpuosd_alive: the daemon still runs.
# gpuosd_stop [GRACE_S [STATUS_JSON]]
#   SIGTERM, then SIGKILL after GRACE_S (default 20), and reaps it. With STATUS_JSON writes
#   {"started","alive_at_end","stopped_by","stopped_cleanly","exit_status"} there. Returns 0 when
#   there was no daemon to stop, else the daemon's exit status.
# Sourced again (space_domain.sh sources it too): what a running daemon set stays.
GPUOSD_PID=${GPUOSD_PID:-}
GPUOSD_STARTED=${GPUOSD_STARTED:-0}
GPUOSD_PORT=${GPUOSD_PORT:-}

gpuosd_start() {
  GPUOSD_CLI=$1 GPUOSD_SOCKET=$2 GPUOSD_LOG=$3
  shift 3
  GPUOSD_STARTED=0 GPUOSD_PORT=
  rm -f "$GPUOSD_SOCKET"
  setsid "$@" </dev/null >"$GPUOSD_LOG" 2>&1 &
  GPUOSD_PID=$!
}

gpuosd_start_metrics() {
  local secs=$4
  gpuosd_start "$1" "$2" "$3" "${@:5}" --metrics-listen 127.0.0.1:0
  gpuosd_wait "$secs" gpuosd_metrics_up
}

gpuosd_alive() { [[ -n $GPUOSD_PID ]] && kill -0 "$GPUOSD_PID" 2>/dev/null; }

gpuosd_answers() {
  timeout "${GPUOSD_PS_TIMEOUT_S:-5}" "$GPUOSD_CLI" ps --socket "$GPUOSD_SOCKET" >/dev/null 2>&1
}

gpuosd_metrics_up() {
  GPUOSD_PORT=$(sed -n 's/.*metrics on .*(port \([0-9]*\)).*/\1/p' "$GPUOSD_LOG" 2>/dev/null | head -1)
  [[ -n $GPUOSD_PORT ]]
}

gpuosd_metric() {
  curl -s "http://127.0.0.1:$GPUOSD_PORT/metrics" | awk -v m="$1" '$1==m {print $2}'
}

gpuosd_wait() {
  local secs=$1 end
  shift
  (($# > 0)) || set -- gpuosd_answers
  end=$(($(date +%s%N) / 1000000 + secs * 1000))
  while (($(date +%s%N) / 1000000 < end)); do
    if "$@"; then
      GPUOSD_STARTED=1
      return 0
    fi
    gpuosd_alive || return 1
    sleep 0.1
  done
  return 1
}

gpuosd_stop() {
  local grace=${1:-20} status=${2:-} alive=false stopped=false how=none rc=0 _
  [[ -n $GPUOSD_PID ]] || return 0
  if kill -0 "$GPUOSD_PID" 2>/dev/null; then
    alive=true
    kill -TERM "$GPUOSD_PID" 2>/dev/null
    how=SIGTERM
    for _ in $(seq 1 $((grace * 10))); do
      kill -0 "$GPUOSD_PID" 2>/dev/null || { stopped=true; break; }
      sleep 0.1
    done
    if [[ $stopped == false ]]; then
      kill -KILL "$GPUOSD_PID" 2>/dev/null
      how=SIGKILL
    fi
  fi
  wait "$GPUOSD_PID" 2>/dev/null
  rc=$?
  if [[ -n $status ]]; then
    printf '{"started":%s,"alive_at_end":%s,"stopped_by":"%s","stopped_cleanly":%s,"exit_status":%d}\n' \
      "$([[ $GPUOSD_STARTED -eq 1 ]] && echo true || echo false)" "$alive" "$how" "$stopped" "$rc" >"$status"
  fi
  GPUOSD_PID=
  return "$rc"
}
