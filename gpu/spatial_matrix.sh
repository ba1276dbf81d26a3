#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Spatial sharing on the co-location suite (issue #5): gpu/time_matrix.sh with the synthetic
# workload (fixed-work kernels) by default and gpuos-space-priority beside gpuos-time-priority.
#   OUT=/results bash gpu/spatial_matrix.sh        (repo root; build tree at ./build)
# Settings: WORKLOAD=synthetic|torch LOAD=0.5 WINDOW=15 HP_SMS=0 (gpuos run --sms; 0 = default)
#           LEND_AFTER_MS=-1 (gpuosd's default) LEND_MAX_KERNEL_MS=0 (gpuosd's default) MODES=exclusive-hp,exclusive-be,time-slicing,mps
#           GPUOS=gpuos-time-priority,gpuos-space-priority
#           HP_BLOCKS_PER_SM=0 (synthetic HP grid per SM; 1 = an HP that runs as fast on half the SMs,
#           0 = the BE's; on the H200 2 blocks on one SM take 1.26x as long as 1, so every such grid
#           needs the whole GPU) HP_BLOCKS=0 (HP grid in blocks, overrides HP_BLOCKS_PER_SM: 64 = an HP
#           that needs 64 SMs and runs as fast on a 64-SM partition, the case right-sizing is for)
#           BE_RESERVE=0 ([spatial] be_reserve_groups: SM groups HP leaves to BE; 0 = gpuosd's default)
#           MORE= (more run_matrix.py flags, e.g. MORE="--be-params-m 125 --be-batch 1" for a light BE)
#           TRACE= (non-empty: HP writes a per-request latency trace, --synth-trace)
#           DEVICE_TRACE= (non-empty: HP runs the instrumented kernel and records the GPU's own
#           timestamps of each kernel, --synth-device-trace)
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
WORKLOAD=${WORKLOAD:-synthetic} WINDOW=${WINDOW:-15} MODES=${MODES:-exclusive-hp,exclusive-be,time-slicing,mps} \
  GPUOS=${GPUOS:-gpuos-time-priority,gpuos-space-priority} LABEL=space BUDGET_S=${BUDGET_S:-540} \
  EXTRA="--space-hp-sms ${HP_SMS:-0} --space-lend-after-ms ${LEND_AFTER_MS:--1} --space-lend-max-kernel-ms ${LEND_MAX_KERNEL_MS:-0} --space-be-reserve-groups ${BE_RESERVE:-0} --synth-hp-blocks-per-sm ${HP_BLOCKS_PER_SM:-0} --synth-hp-blocks ${HP_BLOCKS:-0} ${TRACE:+--synth-trace} ${DEVICE_TRACE:+--synth-device-trace} ${MORE:-}" \
  exec bash gpu/time_matrix.sh
