#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ctest cli.with_a_system_gpuosd (issue #43: two CLI tests failed in a CI run while a system gpuosd
# ran on the machine). Runs the CLI tests while a "system" gpuosd serves /run/gpuos/gpuosd.sock with
# /etc/gpuos/gpuos.toml -- inside a mount namespace of their own (unshare -m), where /run is a fresh
# tmpfs and /etc an overlay whose writes land in that tmpfs: the machine's own /run/gpuos and
# /etc/gpuos (and a gpuosd that may really run there) are neither seen nor touched, and everything
# goes with the namespace. The daemon is ended by its pid, whatever happens.
# Needs root (a mount namespace of one's own without a user namespace): exits 77 (skipped) without,
# or where the kernel refuses the mounts; GPUOS_REQUIRE_SYSTEM_DAEMON_TEST=1 (.ci/run) makes that a
# failure.
# Usage: system_daemon_test.sh GPUOS_BIN TEST_BIN...   (the CLI's gtest binaries, each run whole)
set -euo pipefail
gpuos=$1
shift
tests="$*"

skip() {
  if [[ -n ${GPUOS_REQUIRE_SYSTEM_DAEMON_TEST:-} ]]; then
    echo "GPUOS_REQUIRE_SYSTEM_DAEMON_TEST is set but $1" >&2
    exit 1
  fi
  echo "skipped: $1"
  exit 77
}
[[ $(id -u) == 0 ]] || skip "a mount namespace of its own needs root"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
unshare -m --propagation private true 2>/dev/null || skip "this machine refuses a mount namespace (unshare -m)"

inner() {
  set -euo pipefail
  mount -t tmpfs -o mode=0755 gpuos-ci-run /run || return 77
  mkdir -p /run/.etc-upper /run/.etc-work /run/gpuos
  chmod 0755 /run/gpuos
  mount -t overlay gpuos-ci-etc -o lowerdir=/etc,upperdir=/run/.etc-upper,workdir=/run/.etc-work /etc || return 77
  mkdir -p /etc/gpuos
  # The system config a host would have: the shipped one's daemon settings, with the system socket
  # and a trust domain of its own (a test that read this file would see "hostdom").
  cat >/etc/gpuos/gpuos.toml <<'TOML'
[daemon]
socket = "/run/gpuos/gpuosd.sock"
[scheduler]
policy = "priority"
[[spatial.domain]]
name = "hostdom"
TOML
  local log=/run/gpuos/gpuosd.log
  "$gpuos" daemon --simulate 1 --config /etc/gpuos/gpuos.toml --metrics-listen "" >"$log" 2>&1 &
  daemon_pid=$!  # (global: the EXIT trap runs after this function returned)
  trap 'kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null || true' EXIT
  local pid=$daemon_pid
  local i
  for i in $(seq 1 600); do  # a ceiling for a loaded machine, not a claim about speed
    [[ -S /run/gpuos/gpuosd.sock ]] && "$gpuos" ps --socket /run/gpuos/gpuosd.sock >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "the system gpuosd exited:"; cat "$log"; return 1; }
    sleep 0.1
  done
  # Proof that the daemon answers where the tests must not look: as root, with no --socket and no
  # GPUOS_SOCKET, `gpuos ps` finds it through the system config.
  if ! env -u GPUOS_SOCKET -u GPUOS_CONFIG "$gpuos" ps >/dev/null; then
    echo "the system gpuosd does not answer at /run/gpuos/gpuosd.sock:"
    cat "$log"
    return 1
  fi
  echo "a system gpuosd (pid $pid) serves /run/gpuos/gpuosd.sock with /etc/gpuos/gpuos.toml"
  local rc=0 t
  for t in $tests; do
    echo "=== $t"
    "$t" || rc=$?
  done
  kill -0 "$pid" 2>/dev/null || { echo "the system gpuosd did not outlive the tests:"; cat "$log"; rc=1; }
  return $rc
}
export -f inner
# The simulated GPU's segment: a private one (the default, /dev/shm/gpuos-sim-<uid>, outlives the
# daemon by design), and it and any named after it go afterwards, whatever happened.
export GPUOS_SIM_SHM=/gpuos-ci-sysd-$$
trap 'rm -f /dev/shm"$GPUOS_SIM_SHM"*' EXIT
export gpuos tests
rc=0
unshare -m --propagation private bash -c inner || rc=$?
[[ $rc == 77 ]] && skip "the kernel refused a tmpfs over /run or an overlay over /etc in a mount namespace"
exit $rc
