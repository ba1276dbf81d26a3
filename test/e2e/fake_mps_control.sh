#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A stand-in nvidia-cuda-mps-control for the e2e tests (no GPU, no MPS): `-d` starts a background
# process named like the real control daemon (a copy of sleep(1), so its comm is "nvidia-cuda-mps")
# and records its pid where the real one does; on stdin, `get_server_list` succeeds while it lives
# and `quit` stops it.
p="$CUDA_MPS_PIPE_DIRECTORY"
[ -n "$p" ] && [ -d "$p" ] || { echo "no pipe directory" >&2; exit 4; }
alive() { [ -f "$p/nvidia-cuda-mps-control.pid" ] && kill -0 "$(cat "$p/nvidia-cuda-mps-control.pid")" 2>/dev/null; }
if [ "$1" = "-d" ]; then
  if alive; then echo "An instance of this daemon is already running" >&2; exit 1; fi
  cp "$(command -v sleep)" "$p/nvidia-cuda-mps-control"
  "$p/nvidia-cuda-mps-control" 100000 </dev/null >/dev/null 2>&1 &
  echo $! > "$p/nvidia-cuda-mps-control.pid"
  : > "$p/control"
  exit 0
fi
read -r cmd
case "$cmd" in
  get_server_list) alive ;;
  quit) if alive; then kill "$(cat "$p/nvidia-cuda-mps-control.pid")"; fi
        rm -f "$p/control" "$p/nvidia-cuda-mps-control.pid"; exit 0 ;;
  *) echo "unknown command $cmd" >&2; exit 1 ;;
esac
