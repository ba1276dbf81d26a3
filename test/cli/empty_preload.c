// SPDX-License-Identifier: Apache-2.0
/* Stands in for libgpuos.so in the CLI tests: loads, does nothing. */
int gpuos_cli_test_preload_marker;
