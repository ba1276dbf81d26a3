#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the Release tree (build-gpu) and copies the stripped binaries the GPU scripts need into the
# git-ignored .gpucarry/{bin,lib}, small enough to travel to the device machine with the working tree.
# On the device: `ln -sfn .gpucarry build; export LD_LIBRARY_PATH=$PWD/build/lib`.
# CARRY_FROM=build takes the binaries of that (already built) tree instead, without a Release build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
from=${CARRY_FROM:-build-gpu}
if [[ -z ${CARRY_FROM:-} ]]; then cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null; fi
cmake --build "$from" --target gpuos_cli gpuosd gpuos gpuos-synth gpuos-bench-launch gpuos-bypass-probe gpuos-nvml-probe gpuos-kv-probe gpuos_kv
rm -rf .gpucarry && mkdir -p .gpucarry/bin .gpucarry/lib
for b in gpuos gpuosd gpuos-synth gpuos-bench-launch gpuos-bypass-probe gpuos-nvml-probe gpuos-kv-probe; do strip -o ".gpucarry/bin/$b" "$from/bin/$b"; done
strip -o .gpucarry/lib/libgpuos.so "$from/lib/libgpuos.so"
strip -o .gpucarry/lib/libgpuos_kv.so "$from/lib/libgpuos_kv.so"
bench_so=$(ldd "$from/bin/gpuos-bench-launch" | awk '/libbenchmark/ {print $3}')
[[ -n $bench_so ]] && cp -L "$bench_so" .gpucarry/lib/
# GPU probes that run as tenants (nvcc: the device machine's is the same toolkit).
nvcc -O2 -arch=sm_90 -o .gpucarry/bin/kernel_anatomy gpu/tests/kernel_anatomy.cu -lcuda
# The best-effort companion of gpu/mps_cost.sh's presence variants.
nvcc -O2 -arch=sm_90 -o .gpucarry/bin/presence_be gpu/tests/presence_be.cu
# HP launch-to-start beside a BE kernel: time-slicing, MPS priorities, gpuos's gate (gpu/window_bench.sh).
nvcc -O2 -arch=sm_90 -o .gpucarry/bin/window_bench gpu/tests/window_bench.cu
# The kernel a bypassing tenant launches around libgpuos.so (gpuos-bypass-probe --cubin: verify_nvml.sh).
nvcc -O2 -arch=sm_90 -cubin -o .gpucarry/lib/spin.cubin gpu/tests/spin_kernel.cu
du -sh .gpucarry
