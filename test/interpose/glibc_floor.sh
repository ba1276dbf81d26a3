#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# libgpuos.so goes into other people's processes and containers: it may ask the dynamic loader
# only for what glibc 2.34 has (RHEL 9; Ubuntu 22.04 has 2.35) and load nothing but libc and
# libgcc_s (src/interpose/glibc_compat.cc says why). Usage: glibc_floor.sh LIBGPUOS_SO
set -euo pipefail
lib=$1
newest=$(objdump -T "$lib" | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2,2n | tail -1)
minor=${newest#GLIBC_2.}
if (( minor > 34 )); then
  echo "FAIL: $lib needs $newest (the floor is GLIBC_2.34):" >&2
  objdump -T "$lib" | grep -E "GLIBC_2\.(3[5-9]|[4-9][0-9])" >&2
  exit 1
fi
needed=$(objdump -p "$lib" | awk '/NEEDED/ && $2 !~ /^ld-linux/ {print $2}' | sort | tr '\n' ' ')
if [[ $needed != "libc.so.6 libgcc_s.so.1 " ]]; then
  echo "FAIL: $lib loads: $needed" >&2
  exit 1
fi
echo "ok: newest glibc symbol $newest; loads $needed"
