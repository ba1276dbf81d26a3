# SPDX-License-Identifier: Apache-2.0
# cmake/Requirements.cmake in script mode: a header no package provides stops with the apt-get line
# that names the package (issue #57 item 7), and one that exists is found. ctest passes on the
# message (PASS_REGULAR_EXPRESSION), whatever the exit status.
include(${SOURCE_DIR}/cmake/Requirements.cmake)
set(CMAKE_INCLUDE_PATH ${SOURCE_DIR}/include)  # script mode searches no system folders
gpuos_require_header(GPUOS_TEST_PRESENT gpuos/abi.h gpuos-itself)
message(STATUS "found: gpuos/abi.h in ${GPUOS_TEST_PRESENT}")
gpuos_require_header(GPUOS_TEST_MISSING gpuos/no_such_header_anywhere.h libgpuos-nonesuch-dev)
