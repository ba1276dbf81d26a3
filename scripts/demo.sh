#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets up a fresh Debian 12 machine (packages, build) and runs `gpuos demo`.
# With no GPU the demo runs on the driver test double (simulated device).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # What configuring the whole tree needs (the tests' and gpuos-dra's libraries too, so that the same
  # build/ serves .ci/run and the README's later commands), not only the demo's programs.
  apt-get install -y -qq --no-install-recommends cmake ninja-build g++ python3 libgtest-dev \
    libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libcurl4-openssl-dev \
    pkg-config libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc >/dev/null
fi
if [ -d /usr/local/cuda/bin ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Only what `gpuos demo` runs (target gpuos_demo in CMakeLists.txt: about 105 of the ~270 steps);
# `cmake --build build` builds the rest (tests, gpuos-dra, benchmarks).
cmake --build build --parallel "$(nproc)" --target gpuos_demo
exec build/bin/gpuos demo "$@"
