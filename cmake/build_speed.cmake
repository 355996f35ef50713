# Build time. Most of a translation unit's compile time is libtorch's headers (g++ 12, -O3,
# 2026-12-05: <torch/torch.h> alone 38 s of front end, a whole test file 60 s of which 14 s is
# its own code). Two ways to parse them fewer times:
#   - unity builds (CUSTOMOP_UNITY_BUILD, the default for every target): up to 8 files of a
#     target compiled as one translation unit;
#   - a precompiled header (CUSTOMOP_PCH) for the targets that cannot be batched, because
#     their files each define the same names in an anonymous namespace (the test suites'
#     XArgs, ScaleArgs, ...): customop_per_file_build below.

option(CUSTOMOP_PCH "Precompile libtorch's headers for the targets built file by file" ON)

# customop_per_file_build(<target> [PCH <header>...])
# Compiles <target> one file at a time (no unity build) and, with CUSTOMOP_PCH and a unity
# build otherwise on, precompiles the PCH headers once for the target (each file then loads
# them in about 13 s instead of parsing them for 45 s). The headers are added to every file of
# the target: list only what its files include anyway.
function(customop_per_file_build target)
  cmake_parse_arguments(arg "" "" "PCH" ${ARGN})
  set_target_properties(${target} PROPERTIES UNITY_BUILD OFF)
  if(arg_PCH AND CUSTOMOP_PCH AND CUSTOMOP_UNITY_BUILD)
    target_precompile_headers(${target} PRIVATE ${arg_PCH})
  endif()
endfunction()
