# Carried dependencies, for a machine with no network and no development packages (the lent
# GPU machine; see ci/gpu-carry, which fills the folder, and ci/gpu-check, which uses it).
#   -DCUSTOMOP_CARRY_DIR=<dir> -DCMAKE_PROJECT_customop_INCLUDE=<repo>/ci/carry.cmake
# (or include(ci/carry.cmake) right after project()). <dir> holds:
#   prefix/      a relocatable /usr subset: CLI11,
#                nlohmann_json, libpng + zlib, ... with their own CMake package files; it is
#                prepended to CMAKE_PREFIX_PATH, so the usual find_package calls find it
#   pfr/         Boost.PFR >= 2.2 headers (boost/pfr.hpp, boost/pfr/): CUSTOMOP_PFR_INCLUDE_DIR
#   googletest/  the GoogleTest/GoogleMock sources; built with add_subdirectory when
#                find_package(GTest) finds no installed GoogleTest
include_guard(GLOBAL)
if(NOT CUSTOMOP_CARRY_DIR)
  return()
endif()
get_filename_component(CUSTOMOP_CARRY_DIR "${CUSTOMOP_CARRY_DIR}" ABSOLUTE)
if(NOT IS_DIRECTORY "${CUSTOMOP_CARRY_DIR}")
  message(FATAL_ERROR "customop: CUSTOMOP_CARRY_DIR=${CUSTOMOP_CARRY_DIR} is not a folder "
                      "(fill it with ci/gpu-carry)")
endif()
message(STATUS "customop: carried dependencies from ${CUSTOMOP_CARRY_DIR}")

if(IS_DIRECTORY "${CUSTOMOP_CARRY_DIR}/prefix")
  list(PREPEND CMAKE_PREFIX_PATH "${CUSTOMOP_CARRY_DIR}/prefix")
  # The carried package files live where Debian puts them (lib/<multiarch>/cmake); name the
  # folder outright in case this machine's compiler reports another multiarch (or none).
  file(GLOB _carry_cmake_dirs LIST_DIRECTORIES true "${CUSTOMOP_CARRY_DIR}/prefix/lib/*/cmake")
  foreach(_d IN LISTS _carry_cmake_dirs)
    cmake_path(GET _d PARENT_PATH _libdir)
    list(APPEND CMAKE_PREFIX_PATH "${_libdir}")
    list(APPEND CMAKE_LIBRARY_PATH "${_libdir}")
  endforeach()
endif()

if(EXISTS "${CUSTOMOP_CARRY_DIR}/pfr/boost/pfr.hpp" AND NOT CUSTOMOP_PFR_INCLUDE_DIR)
  set(CUSTOMOP_PFR_INCLUDE_DIR "${CUSTOMOP_CARRY_DIR}/pfr" CACHE PATH "Boost.PFR (carried)")
endif()

# GoogleTest from source, exposed to the project's find_package(GTest) through a package file
# that only says "found": the GTest::gtest / GTest::gtest_main / GTest::gmock targets already
# exist (googletest defines them as aliases).
set(_carry_gtest_config "${CMAKE_BINARY_DIR}/_carry/gtest-config")
if(EXISTS "${CUSTOMOP_CARRY_DIR}/googletest/CMakeLists.txt")
  if(NOT GTest_DIR STREQUAL _carry_gtest_config)
    find_package(GTest QUIET)
  endif()
  if(NOT GTest_FOUND OR GTest_DIR STREQUAL _carry_gtest_config)
    message(STATUS "customop: building GoogleTest from ${CUSTOMOP_CARRY_DIR}/googletest")
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK ON CACHE BOOL "" FORCE)
    set(gtest_force_shared_crt ON CACHE BOOL "" FORCE)
    add_subdirectory("${CUSTOMOP_CARRY_DIR}/googletest" "${CMAKE_BINARY_DIR}/_carry/googletest"
                     EXCLUDE_FROM_ALL SYSTEM)
    file(WRITE "${_carry_gtest_config}/GTestConfig.cmake"
         "# Written by ci/carry.cmake: GoogleTest is built from the carried sources.\n"
         "set(GTest_FOUND TRUE)\n")
    set(GTest_DIR "${_carry_gtest_config}" CACHE PATH "GoogleTest package folder" FORCE)
    unset(GTest_FOUND)
  endif()
endif()
