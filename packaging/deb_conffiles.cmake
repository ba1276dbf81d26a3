# SPDX-License-Identifier: Apache-2.0
# CPack pre-build script (CPACK_PRE_BUILD_SCRIPTS, see cpack.cmake): puts the packaged defaults at
# /etc/gpuos/gpuos.toml in the staging tree of the .deb gpuos, where the control file `conffiles`
# names it. Run by cpack only; `cmake --install` never writes /etc. With one package per component
# (CPACK_DEB_COMPONENT_INSTALL) each has its staging tree in <staging>/<component>/.
if(NOT CPACK_TEMPORARY_INSTALL_DIRECTORY OR NOT CPACK_GPUOS_DEFAULT_CONFIG)
  message(FATAL_ERROR "deb_conffiles.cmake: run by cpack (CPACK_TEMPORARY_INSTALL_DIRECTORY unset)")
endif()
set(_root "${CPACK_TEMPORARY_INSTALL_DIRECTORY}")
if(IS_DIRECTORY "${_root}/gpuos")
  set(_root "${_root}/gpuos")
endif()
# file(COPY), not file(INSTALL): the latter would put DESTDIR (set by cpack) in front once more.
file(COPY "${CPACK_GPUOS_DEFAULT_CONFIG}" DESTINATION "${_root}/etc/gpuos"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
