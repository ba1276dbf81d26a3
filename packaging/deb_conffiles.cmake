# CPack pre-build script (CPACK_PRE_BUILD_SCRIPTS, see cpack.cmake): puts the packaged defaults at
# /etc/gpuos/gpuos.toml in the staging tree of the .deb, where the control file `conffiles` names
# it. Run by cpack only; `cmake --install` never writes /etc.
if(NOT CPACK_TEMPORARY_INSTALL_DIRECTORY OR NOT CPACK_GPUOS_DEFAULT_CONFIG)
  message(FATAL_ERROR "deb_conffiles.cmake: run by cpack (CPACK_TEMPORARY_INSTALL_DIRECTORY unset)")
endif()
# file(COPY), not file(INSTALL): the latter would put DESTDIR (set by cpack) in front once more.
file(COPY "${CPACK_GPUOS_DEFAULT_CONFIG}" DESTINATION "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/etc/gpuos"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
