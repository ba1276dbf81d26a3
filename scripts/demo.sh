#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (packages, build) and runs `gpuos demo`.
# With no GPU the demo runs on the driver test double (simulated device).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends cmake ninja-build g++ python3 libgtest-dev \
    libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libcurl4-openssl-dev >/dev/null
fi
if [ -d /usr/local/cuda/bin ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --parallel "$(nproc)"
exec build/bin/gpuos demo "$@"
