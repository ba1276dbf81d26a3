#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/demo.sh builds only the target gpuos_demo (issue #43: a fresh clone's first success in
# minutes, not the whole tree), and that target builds every program `gpuos demo` runs
# (src/cli/demo.cc: bin/gpuosd and bin/gpuos-synth next to bin/gpuos, lib/libgpuos.so, the driver
# double's lib/driver_double/libcuda.so.1 and its NVML stand-in) and none of the rest.
set -euo pipefail
ninja=$1; build=$2; src=$3
fail() { echo "FAIL: $*"; exit 1; }

builds=$(grep -E '^[^#]*cmake --build' "$src/scripts/demo.sh") || fail "scripts/demo.sh builds nothing"
[[ $(wc -l <<<"$builds") == 1 ]] || fail "scripts/demo.sh builds more than once: $builds"
grep -qE -- '--target gpuos_demo( |$)' <<<"$builds" || fail "scripts/demo.sh does not build only gpuos_demo: $builds"

cmds=$("$ninja" -C "$build" -t commands gpuos_demo) || fail "no target gpuos_demo"
outputs=$(grep -oE ' -o [^ ]+' <<<"$cmds" | sed 's/^ -o //' | grep -v '\.o$' || true)
for need in bin/gpuos bin/gpuosd bin/gpuos-synth lib/libgpuos.so lib/driver_double/libcuda.so.1 \
            lib/driver_double/libnvidia-ml.so.1; do
  grep -qx "$need" <<<"$outputs" || fail "gpuos_demo does not build $need (it builds: $(echo $outputs))"
done
# Nothing the demo does not run: no tests, no gpuos-dra (gRPC), no benchmarks, no fuzzers.
extra=$(grep -vxE 'bin/gpuos|bin/gpuosd|bin/gpuos-synth|lib/libgpuos.so|lib/driver_double/lib(cuda|nvidia-ml).so.1|.*synth_kernels.fatbin' <<<"$outputs" || true)
[[ -z $extra ]] && echo "gpuos_demo links only what the demo runs" || fail "gpuos_demo also builds: $(echo $extra)"
steps=$(wc -l <<<"$cmds")
all=$("$ninja" -C "$build" -t commands all | wc -l)
echo "gpuos_demo: $steps of $all build steps"
(( steps * 2 < all )) || fail "gpuos_demo takes $steps of $all steps"
echo "demo target: ok"
