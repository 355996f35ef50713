# Boost.PFR >= 2.2 (Boost >= 1.84): customop reads args-struct field names with
# boost::pfr::names_as_array / get_name, which older PFR (Debian 12's Boost 1.81) lacks. PFR is
# header-only and includes only standard headers, so only its own headers are staged into the
# build tree (the rest of that Boost release must not shadow a system Boost) and installed
# beside customop's headers (include/customop/third_party, with Boost's licence).
#   CUSTOMOP_PFR_INCLUDE_DIR  a folder holding boost/pfr.hpp of PFR >= 2.2; default: the PyPI
#                             package boost-headers of CUSTOMOP_PYTHON (ci/setup installs it,
#                             pinned by hash in ci/versions.env), else a Boost >= 1.84 on the
#                             compiler's include path.
# Defines CUSTOMOP_PFR_STAGED_DIR, the staged include folder.
include_guard(GLOBAL)
include(GNUInstallDirs)

set(CUSTOMOP_PFR_INCLUDE_DIR "" CACHE PATH
    "Folder holding boost/pfr.hpp from Boost.PFR >= 2.2 (Boost >= 1.84); empty: search")
set(_pfr_looked "")
if(NOT CUSTOMOP_PFR_INCLUDE_DIR AND CUSTOMOP_PYTHON)
  execute_process(
    COMMAND "${CUSTOMOP_PYTHON}" -c "import boost_headers; print(boost_headers.get_include())"
    OUTPUT_VARIABLE _pfr_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _pfr_rc)
  if(_pfr_rc EQUAL 0 AND EXISTS "${_pfr_py}/boost/pfr/core_name.hpp")
    set(CUSTOMOP_PFR_INCLUDE_DIR "${_pfr_py}" CACHE PATH "" FORCE)
  endif()
  string(APPEND _pfr_looked " the boost-headers package of ${CUSTOMOP_PYTHON};")
endif()
if(NOT CUSTOMOP_PFR_INCLUDE_DIR)
  find_path(_pfr_system_dir NAMES boost/pfr/core_name.hpp)
  if(_pfr_system_dir)
    set(CUSTOMOP_PFR_INCLUDE_DIR "${_pfr_system_dir}" CACHE PATH "" FORCE)
  endif()
  string(APPEND _pfr_looked " the compiler's include path;")
endif()
if(NOT EXISTS "${CUSTOMOP_PFR_INCLUDE_DIR}/boost/pfr/core_name.hpp")
  message(FATAL_ERROR
    "customop: needs Boost.PFR >= 2.2 (Boost >= 1.84) for args-struct field names; found none "
    "(looked in${_pfr_looked} CUSTOMOP_PFR_INCLUDE_DIR='${CUSTOMOP_PFR_INCLUDE_DIR}'). Run "
    "ci/setup (installs the pinned PyPI boost-headers into .venv) or pass "
    "-DCUSTOMOP_PFR_INCLUDE_DIR=<folder with boost/pfr.hpp>. Debian 12's libboost1.81-dev is too old.")
endif()
message(STATUS "customop: Boost.PFR from ${CUSTOMOP_PFR_INCLUDE_DIR}")

set(CUSTOMOP_PFR_STAGED_DIR "${PROJECT_BINARY_DIR}/_pfr/include")
file(REMOVE_RECURSE "${CUSTOMOP_PFR_STAGED_DIR}")
file(COPY "${CUSTOMOP_PFR_INCLUDE_DIR}/boost/pfr.hpp" "${CUSTOMOP_PFR_INCLUDE_DIR}/boost/pfr"
     DESTINATION "${CUSTOMOP_PFR_STAGED_DIR}/boost")
# Boost's licence travels with its headers (the pip package keeps it in its dist-info).
file(GLOB _pfr_licence "${CUSTOMOP_PFR_INCLUDE_DIR}/../../boost_headers-*.dist-info/licenses/LICENSE"
     "${CUSTOMOP_PFR_INCLUDE_DIR}/../LICENSE_1_0.txt")
if(_pfr_licence)
  list(GET _pfr_licence 0 _pfr_licence)
  file(COPY_FILE "${_pfr_licence}" "${CUSTOMOP_PFR_STAGED_DIR}/boost/pfr/LICENSE_1_0.txt")
endif()
