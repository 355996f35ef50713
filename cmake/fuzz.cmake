# CUSTOMOP_FUZZ (preset fuzz, clang): the libFuzzer targets of tests/fuzz, with every customop
# library compiled for libFuzzer's coverage feedback and with ASan + UBSan, so a finding in
# customop's own code is seen where it happens. libtorch is not instrumented (ci/fuzz sources
# ci/sanitizers.env for the options that needs). The test suites are not built in this mode
# (tests/CMakeLists.txt); with CUSTOMOP_FUZZ off, the same targets replay their committed
# inputs as ctest tests (label fuzz).
include_guard(GLOBAL)
if(NOT CUSTOMOP_FUZZ)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "customop: CUSTOMOP_FUZZ needs clang (libFuzzer), found "
                      "${CMAKE_CXX_COMPILER_ID}; configure with `cmake --preset fuzz`")
endif()
# NB: libstdc++ 12 defines std::source_location only for compilers with
# __builtin_source_location (clang >= 15); clang 14 gets the lint leg's stand-in, force-included.
add_compile_options("SHELL:-include ${PROJECT_SOURCE_DIR}/ci/lint/source_location_shim.h")
# -fsanitize=fuzzer-no-link: coverage instrumentation without libFuzzer's main (the targets
# link -fsanitize=fuzzer). -fno-sanitize=vptr: as in cmake/warnings.cmake (libtorch does not
# export every typeinfo UBSan's vptr check needs). _GLIBCXX_ASSERTIONS: bounds-checked
# std::vector / std::string / std::span access in customop's code (no ABI change).
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr
                    -fno-sanitize-recover=undefined -fno-omit-frame-pointer -D_GLIBCXX_ASSERTIONS)
add_link_options(-fsanitize=address,undefined -fno-sanitize=vptr)
