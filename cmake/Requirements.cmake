# SPDX-License-Identifier: Apache-2.0
# What the build needs from Debian, each named by the package that provides it: a missing one stops
# the configure with the apt-get line that fixes it, not CMake's bare "Could not find" (issue #57).

# gpuos_require_header(VAR HEADER PACKAGE...): VAR is the folder holding HEADER.
function(gpuos_require_header var header)
  find_path(${var} ${header})
  if(NOT ${var})
    message(FATAL_ERROR "gpuos needs ${header}, which Debian's ${ARGN} provides: apt-get install ${ARGN}")
  endif()
endfunction()

# gpuos_require_package(NAME PACKAGES... [ARGS args...]): find_package(NAME args...) in the caller's
# scope (a macro: its variables and targets are the caller's), or the apt-get line.
macro(gpuos_require_package name)
  cmake_parse_arguments(gpuos_req "" "" "ARGS" ${ARGN})
  find_package(${name} ${gpuos_req_ARGS} QUIET)
  if(NOT ${name}_FOUND)
    message(FATAL_ERROR "gpuos needs ${name}, which Debian's ${gpuos_req_UNPARSED_ARGUMENTS} provides: "
                        "apt-get install ${gpuos_req_UNPARSED_ARGUMENTS}")
  endif()
endmacro()
