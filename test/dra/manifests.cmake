# SPDX-License-Identifier: Apache-2.0
# ctest dra.manifests: deploy/ (the Kubernetes manifests of gpuos-dra, issue #26) against strict
# schemas of their API kinds, cross-references and the gpuos TenantConfig, plus several hundred
# mutated copies that must be refused (test/dra/manifest_schema.py says what it checks). gpuosd's
# config in the ConfigMap goes through the real `gpuos config check`. Included from
# test/CMakeLists.txt; test/dra/CMakeLists.txt holds the C++ tests of gpuos-dra.
find_package(Python3 COMPONENTS Interpreter)
# PyYAML: Debian's python3-yaml (.ci/run) is the system python's; a python found elsewhere (pyenv)
# may lack it, so fall back to the system one. With neither, the test still runs and says so.
set(_gpuos_manifest_python "${Python3_EXECUTABLE}")
foreach(_candidate "${Python3_EXECUTABLE}" /usr/bin/python3)
  if(_candidate)
    execute_process(COMMAND "${_candidate}" -c "import yaml" RESULT_VARIABLE _no_yaml OUTPUT_QUIET ERROR_QUIET)
    if(_no_yaml EQUAL 0)
      set(_gpuos_manifest_python "${_candidate}")
      break()
    endif()
  endif()
endforeach()
if(NOT _gpuos_manifest_python)
  set(_gpuos_manifest_python python3)
endif()
set(_gpuos_manifest_args --deploy ${CMAKE_SOURCE_DIR}/deploy)
if(TARGET gpuos_cli)
  list(APPEND _gpuos_manifest_args --gpuos-cli $<TARGET_FILE:gpuos_cli>)
endif()
add_test(NAME dra.manifests
         COMMAND ${_gpuos_manifest_python} ${CMAKE_CURRENT_LIST_DIR}/manifest_schema.py ${_gpuos_manifest_args})
set_tests_properties(dra.manifests PROPERTIES LABELS "dra" TIMEOUT 120)

# ctest dra.proto_fields: gpuos's own .proto files (src/dra/proto) against the upstream facts
# recorded in src/dra/proto/upstream_fields.json (fields, numbers, types, labels, enum values, RPCs;
# each file's upstream repository, path and tag). No build needed.
add_test(NAME dra.proto_fields
         COMMAND ${_gpuos_manifest_python} ${CMAKE_CURRENT_LIST_DIR}/proto_fields_test.py ${CMAKE_SOURCE_DIR}/src/dra/proto)
set_tests_properties(dra.proto_fields PROPERTIES LABELS "dra" TIMEOUT 60)
