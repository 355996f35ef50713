# Installed package: find_package(customop) gives customop::customop, customop::gradcheck and
# customop::ops (each when built), the customop-gradcheck CLI in bin/, and re-creates the
# customop::torch (and, with CUDA, customop::torch_cuda) targets from the consumer's torch:
#   cmake -DCMAKE_PREFIX_PATH=<prefix> -DCUSTOMOP_PYTHON=<python with torch> ...
# (or -DCUSTOMOP_TORCH_ROOT=<torch package folder>; by default the python this was built with).
# The consumer's torch must be the version this was built against: libtorch has no stable ABI.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CUSTOMOP_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/customop" CACHE STRING
    "Where the installed package puts customopConfig.cmake (relative to the prefix)")

# NB: the torch targets are interface targets of this build, full of absolute paths into one
# venv; they are not exported. The exported link interfaces name them through a generator
# expression instead ($<1:customop::torch> is not resolved at export time), and the installed
# config re-creates them with cmake/torch.cmake. Internal helpers (customop_warnings) that a
# static library would leak into its interface as $<LINK_ONLY:...> are kept to the build tree.
function(_customop_prepare_export target)
  get_target_property(_libs ${target} INTERFACE_LINK_LIBRARIES)
  if(NOT _libs)
    return()
  endif()
  set(_out "")
  foreach(_lib IN LISTS _libs)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _bare "${_lib}")
    if(_bare MATCHES "^(customop::torch|customop_torch)$")
      list(APPEND _out "$<BUILD_INTERFACE:${_lib}>" "$<INSTALL_INTERFACE:$<1:customop::torch>>")
    elseif(_bare MATCHES "^(customop::torch_cuda|customop_torch_cuda)$")
      list(APPEND _out "$<BUILD_INTERFACE:${_lib}>"
                       "$<INSTALL_INTERFACE:$<1:customop::torch_cuda>>")
    elseif(_bare STREQUAL "customop_warnings")
      list(APPEND _out "$<BUILD_INTERFACE:${_lib}>")
    else()
      list(APPEND _out "${_lib}")
    endif()
  endforeach()
  set_property(TARGET ${target} PROPERTY INTERFACE_LINK_LIBRARIES "${_out}")
endfunction()

# Installed libraries and programs find each other through $ORIGIN, and libtorch, cudart, ...
# where they were linked from (INSTALL_RPATH_USE_LINK_PATH: the folders outside this build);
# the consumer's executables get theirs from customop::torch's rpath.
set(_customop_torch_rpath "${CUSTOMOP_TORCH_ROOT}/lib")
set(_customop_export_targets "")
foreach(_t customop customop_gradcheck customop_ops)
  if(TARGET ${_t})
    _customop_prepare_export(${_t})
    set_target_properties(${_t} PROPERTIES INSTALL_RPATH "$ORIGIN;${_customop_torch_rpath}"
                                           INSTALL_RPATH_USE_LINK_PATH ON)
    list(APPEND _customop_export_targets ${_t})
  endif()
endforeach()

if(_customop_export_targets)
  install(TARGETS ${_customop_export_targets}
    EXPORT customopTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT customop_runtime
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT customop_development
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT customop_runtime
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()

if(TARGET customop-gradcheck)
  set_target_properties(customop-gradcheck PROPERTIES
    INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR};${_customop_torch_rpath}"
    INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS customop-gradcheck RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          COMPONENT customop_runtime)
endif()

# Public headers: customop/*.h (core, customop/ops/*.h) and customop/gradcheck/*.h.
foreach(_dir plugin/include gradcheck/include)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${_dir}/" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          COMPONENT customop_development FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
endforeach()

if(_customop_export_targets)
  install(EXPORT customopTargets NAMESPACE customop:: DESTINATION ${CUSTOMOP_INSTALL_CMAKEDIR}
          COMPONENT customop_development)
endif()

# What the installed config needs to re-create the torch targets as this build had them.
set(CUSTOMOP_PACKAGE_WITH_CUDA ${CUSTOMOP_ENABLE_CUDA})
set(CUSTOMOP_PACKAGE_TORCH_VERSION "${CUSTOMOP_TORCH_VERSION}")
set(CUSTOMOP_PACKAGE_TORCH_CXX11_ABI "${CUSTOMOP_TORCH_CXX11_ABI}")
set(CUSTOMOP_PACKAGE_PYTHON "${CUSTOMOP_PYTHON}")
set(CUSTOMOP_PACKAGE_TORCH_ROOT "${CUSTOMOP_TORCH_ROOT}")
set(CUSTOMOP_PACKAGE_TARGETS "")
foreach(_t IN LISTS _customop_export_targets)
  get_target_property(_name ${_t} EXPORT_NAME)
  if(NOT _name)
    set(_name ${_t})
  endif()
  list(APPEND CUSTOMOP_PACKAGE_TARGETS ${_name})
endforeach()
configure_package_config_file(
  "${CMAKE_CURRENT_LIST_DIR}/customopConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/customopConfig.cmake"
  INSTALL_DESTINATION ${CUSTOMOP_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/customopConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/customopConfig.cmake"
  "${PROJECT_BINARY_DIR}/customopConfigVersion.cmake"
  DESTINATION ${CUSTOMOP_INSTALL_CMAKEDIR} COMPONENT customop_development)
install(FILES "${CMAKE_CURRENT_LIST_DIR}/torch.cmake"
  DESTINATION ${CUSTOMOP_INSTALL_CMAKEDIR} RENAME customop_torch.cmake
  COMPONENT customop_development)
install(FILES "${CMAKE_CURRENT_LIST_DIR}/customop_runtime_symbols.map"
  DESTINATION ${CUSTOMOP_INSTALL_CMAKEDIR} COMPONENT customop_development)
