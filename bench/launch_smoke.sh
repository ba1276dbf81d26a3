#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# CI smoke of the launch-overhead benchmark on the driver test double: every variant runs (none
# skipped with an error). The numbers mean nothing here; the H200 gives them (gpu/run_all.sh).
# usage: launch_smoke.sh BUILD_DIR
b=$1
out=$(GPUOS_DRIVER_LIBRARY="$b/lib/driver_double/libcuda.so.1" LD_LIBRARY_PATH="$b/lib/driver_double" \
  GPUOS_SIM_SHM="/gpuos-bench-smoke-$$" GPUOS_BENCH_QUICK=1 GPUOS_ON_NO_DAEMON=passthrough GPUOS_SOCKET="/nonexistent/$$.sock" \
  "$b/bin/gpuos-bench-launch" 2>&1)
rc=$?
rm -f "/dev/shm/gpuos-bench-smoke-$$"  # the simulated GPU's segment
echo "$out"
[ $rc -eq 0 ] || exit 1
echo "$out" | grep -q "ERROR OCCURRED" && exit 1
for v in BM_LaunchDirect BM_LaunchInterposed BM_LaunchJoinedToPartition; do
  echo "$out" | grep -q "^$v" || { echo "missing $v"; exit 1; }
done
exit 0
