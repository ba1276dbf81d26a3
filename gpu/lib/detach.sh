# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by the GPU scripts whose run outlasts one device call (10 min): the one detach/collect
# scheme. The first call starts the run detached (setsid: it outlives the call while the machine is
# held) and waits; a call made again at once waits for the same run and collects it.
#
# detach_start RUN LOG CMD...
#   Empties RUN, writes RUN/started (the time), and runs CMD in its own session, output to LOG;
#   RUN/done gets CMD's exit status when it ends.
# detach_started RUN: a run was started in RUN (under way or done).
# detach_wait RUN WAIT_S LOG HINT
#   Waits (at most WAIT_S s; the tail of LOG every 2 min) for RUN/done. Returns 0 once the run is
#   done; else prints the tail of LOG and "still running after WAIT_S s: HINT" and returns 3.
# detach_status RUN: the run's exit status (as the return value).
# use_carried_build (done when this file is sourced, from the repository root)
#   A device call copies the working tree afresh without the untracked ./build link, so a run begun
#   by an earlier call would find no binaries for its next tenants: links the carried .gpucarry as
#   ./build when there is no build, and puts build/lib on LD_LIBRARY_PATH.
detach_start() {
  local run=$1 log=$2
  shift 2
  rm -rf "$run" && mkdir -p "$run" && date +%T >"$run/started"
  # shellcheck disable=SC2016  # expanded by the detached bash, not here
  setsid bash -c '"${@:2}"; echo $? >"$1/done"' detach "$run" "$@" </dev/null >"$log" 2>&1 &
}

detach_started() { [[ -e $1/started ]]; }

detach_wait() {
  local run=$1 wait_s=$2 log=$3 hint=$4 t=0
  while [[ ! -e $run/done ]] && ((t < wait_s)); do
    sleep 1
    t=$((t + 1))
    ((t % 120 == 0)) && tail -3 "$log"
  done
  [[ -e $run/done ]] && return 0
  tail -15 "$log"
  echo "still running after ${wait_s} s: $hint"
  return 3
}

detach_status() { return "$(cat "$1/done" 2>/dev/null || echo 1)"; }

use_carried_build() {
  [[ ! -e build && -x .gpucarry/bin/gpuos ]] && ln -sfn .gpucarry build
  export LD_LIBRARY_PATH=$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

use_carried_build
