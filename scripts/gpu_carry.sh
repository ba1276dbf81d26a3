#!/usr/bin/env bash
# Builds the Release tree (build-gpu) and copies the stripped binaries the GPU scripts need into the
# git-ignored .gpucarry/{bin,lib}, small enough to travel to the device machine with the working tree.
# On the device: `ln -sfn .gpucarry build; export LD_LIBRARY_PATH=$PWD/build/lib`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu --target gpuos_cli gpuosd gpuos gpuos-synth gpuos-bench-launch gpuos-bypass-probe gpuos-nvml-probe gpuos-kv-probe gpuos_kv
rm -rf .gpucarry && mkdir -p .gpucarry/bin .gpucarry/lib
for b in gpuos gpuosd gpuos-synth gpuos-bench-launch gpuos-bypass-probe gpuos-nvml-probe gpuos-kv-probe; do strip -o ".gpucarry/bin/$b" "build-gpu/bin/$b"; done
strip -o .gpucarry/lib/libgpuos.so build-gpu/lib/libgpuos.so
strip -o .gpucarry/lib/libgpuos_kv.so build-gpu/lib/libgpuos_kv.so
bench_so=$(ldd build-gpu/bin/gpuos-bench-launch | awk '/libbenchmark/ {print $3}')
[[ -n $bench_so ]] && cp -L "$bench_so" .gpucarry/lib/
# GPU probes that run as tenants (nvcc: the device machine's is the same toolkit).
nvcc -O2 -arch=sm_90 -o .gpucarry/bin/kernel_anatomy gpu/tests/kernel_anatomy.cu -lcuda
# The kernel a bypassing tenant launches around libgpuos.so (gpuos-bypass-probe --cubin: verify_nvml.sh).
nvcc -O2 -arch=sm_90 -cubin -o .gpucarry/lib/spin.cubin gpu/tests/spin_kernel.cu
du -sh .gpucarry
