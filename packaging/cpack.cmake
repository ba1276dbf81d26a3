# SPDX-License-Identifier: Apache-2.0
# The Debian packages, one per role: `cpack -G DEB --config build/CPackConfig.cmake` (or `cmake
# --build build --target package`) writes
#   gpuos_<version>_<arch>.deb      the node: gpuosd, gpuos, libgpuos.so, libgpuos_kv.so, the unit,
#                                   the config (install component gpuos, the default);
#   gpuos-dra_<version>_<arch>.deb  the Kubernetes DRA plugin and what it links (gRPC, protobuf,
#                                   curl), for Kubernetes nodes only (install component dra).
# Included at the end of the top-level CMakeLists.txt, so that the packages hold whatever install()
# rule any folder declares (packaging/CMakeLists.txt lists today's), installed under /usr, plus
# /etc/gpuos/gpuos.toml in gpuos as a conffile (dpkg keeps an admin's edits; plain `cmake
# --install` never writes /etc). packaging/deb_test.sh builds, checks (lintian too), installs and
# purges them (ctest e2e_deb, and .ci/run with --install).
set(CPACK_GENERATOR "DEB" CACHE STRING "CPack generators")
set(CPACK_PACKAGE_NAME "gpuos")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_VENDOR "gpuos")
set(CPACK_PACKAGE_CONTACT "gpuos maintainers <maintainers@users.noreply.a-seed-7c699984.example>")
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: each package's description below starts with its own summary line.
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME "DEB-DEFAULT")  # <package>_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION "admin")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")

set(CPACK_DEBIAN_GPUOS_PACKAGE_NAME "gpuos")
set(CPACK_DEBIAN_GPUOS_DESCRIPTION "GPU multitasking for unmodified CUDA programs
gpuosd, the node daemon, shares a node's GPUs among unmodified CUDA
programs (priorities, memory quotas and swapping, spatial partitions); gpuos
is its command line and libgpuos.so the interposer it preloads into each
program; libgpuos_kv.so (and gpuos/kv.h) gives LLM engines elastic KV cache
pools. The driver test double (/usr/lib/driver_double) lets `gpuos demo`
run on a machine without a GPU. Kubernetes nodes also need gpuos-dra.")
set(CPACK_DEBIAN_DRA_PACKAGE_NAME "gpuos-dra")
set(CPACK_DEBIAN_DRA_DESCRIPTION "Kubernetes DRA plugin of gpuos (GPU multitasking)
gpuos-dra is the Kubernetes dynamic resource allocation (DRA) kubelet
plugin of gpuos (driver gpuos.io): it offers each GPU's guaranteed and
best-effort shares to pods and prepares each claim's tenant with gpuosd
(package gpuos), which must run on the same node.")
# It talks to gpuosd of the same version and hands pods /usr/lib/libgpuos.so.
set(CPACK_DEBIAN_DRA_PACKAGE_DEPENDS "gpuos (= ${PROJECT_VERSION})")

# Dependencies from the binaries themselves (dpkg-shlibdeps, package dpkg-dev). libcuda.so.1 comes
# from the NVIDIA driver (not a Debian dependency) or, for the demo, from the double shipped here.
find_program(GPUOS_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(GPUOS_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${GPUOS_DRIVER_DOUBLE_DIR}")
else()
  set(CPACK_DEBIAN_GPUOS_PACKAGE_DEPENDS "libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1")
endif()

# gpuos: /etc/gpuos/gpuos.toml (the packaged defaults) is added to its staging tree just before the
# package is built, and marked a conffile; the maintainer scripts reload systemd and stop gpuosd on
# removal; the ldconfig trigger refreshes the loader's cache for its shared libraries.
set(_gpuos_deb_dir "${CMAKE_BINARY_DIR}/packaging/deb")
file(MAKE_DIRECTORY "${_gpuos_deb_dir}")
file(WRITE "${_gpuos_deb_dir}/conffiles" "/etc/gpuos/gpuos.toml\n")
foreach(script postinst prerm postrm)
  configure_file("${CMAKE_SOURCE_DIR}/packaging/debian/${script}" "${_gpuos_deb_dir}/${script}" COPYONLY
                 FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                                  WORLD_READ WORLD_EXECUTE)
endforeach()
configure_file("${CMAKE_SOURCE_DIR}/packaging/debian/triggers" "${_gpuos_deb_dir}/triggers" COPYONLY
               FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
set(CPACK_DEBIAN_GPUOS_PACKAGE_CONTROL_EXTRA
    "${_gpuos_deb_dir}/conffiles;${_gpuos_deb_dir}/postinst;${_gpuos_deb_dir}/prerm;${_gpuos_deb_dir}/postrm;${_gpuos_deb_dir}/triggers")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_GPUOS_DEFAULT_CONFIG "${CMAKE_SOURCE_DIR}/packaging/gpuos.toml")  # for the script below
set(CPACK_PRE_BUILD_SCRIPTS "${CMAKE_SOURCE_DIR}/packaging/deb_conffiles.cmake")
include(CPack)
