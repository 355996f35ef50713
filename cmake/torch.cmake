# Imported targets for libtorch taken from the pinned PyPI wheel (ci/versions.env).
#   customop::torch       ATen, c10, the autograd engine and TorchScript (CPU part)
#   customop::torch_cuda  the CUDA part (libtorch_cuda, libc10_cuda, cudart)
# We read the wheel's layout directly instead of find_package(Torch): TorchConfig insists on
# a CUDA toolkit matching the wheel's, which the CPU-only torch-2.11 leg (a CUDA 12.8 wheel on
# a CUDA 13.0 machine) does not have.
# Under `pip install .` (scikit-build-core) the default is the python running pip.
if(SKBUILD AND Python_EXECUTABLE)
  set(_customop_default_python "${Python_EXECUTABLE}")
else()
  set(_customop_default_python "${PROJECT_SOURCE_DIR}/.venv/bin/python")
endif()
set(CUSTOMOP_PYTHON "${_customop_default_python}" CACHE FILEPATH
    "Python interpreter whose site-packages hold the pinned torch wheel")
if(NOT CUSTOMOP_TORCH_ROOT)
  execute_process(
    COMMAND "${CUSTOMOP_PYTHON}" -c
      "import os, torch; print(os.path.dirname(torch.__file__), torch.__version__, int(torch._C._GLIBCXX_USE_CXX11_ABI), sep=';')"
    OUTPUT_VARIABLE _torch_info OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _torch_rc WORKING_DIRECTORY /)
  if(NOT _torch_rc EQUAL 0)
    message(FATAL_ERROR "customop: cannot import torch with ${CUSTOMOP_PYTHON}; pass "
                        "-DCUSTOMOP_PYTHON=<the python whose site-packages hold torch> (in "
                        "customop's own source tree, ci/setup makes .venv, the default)")
  endif()
  list(GET _torch_info 0 _root)
  list(GET _torch_info 1 _version)
  list(GET _torch_info 2 _abi)
  set(CUSTOMOP_TORCH_ROOT "${_root}" CACHE PATH "torch package folder (holds include/ and lib/)")
  set(CUSTOMOP_TORCH_VERSION "${_version}" CACHE STRING "torch version found")
  set(CUSTOMOP_TORCH_CXX11_ABI "${_abi}" CACHE STRING "torch._C._GLIBCXX_USE_CXX11_ABI")
endif()
message(STATUS "customop: torch ${CUSTOMOP_TORCH_VERSION} at ${CUSTOMOP_TORCH_ROOT}")

# The supported range (README "Supported torch"): the oldest and newest torch the CI legs test.
# libtorch has no stable C++ ABI and its C++ API changes between releases, so a torch outside
# the range stops the configure step here with one line, instead of failing in the compiler.
set(CUSTOMOP_TORCH_MIN_VERSION 2.11)
set(CUSTOMOP_TORCH_MAX_VERSION 2.15)
option(CUSTOMOP_ALLOW_UNSUPPORTED_TORCH "Configure against a torch outside the tested range" OFF)
function(customop_check_torch_version version)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _minor "${version}")
  if(NOT _minor OR _minor VERSION_LESS CUSTOMOP_TORCH_MIN_VERSION
     OR _minor VERSION_GREATER CUSTOMOP_TORCH_MAX_VERSION)
    string(CONCAT _msg "customop: found torch ${version} (${CUSTOMOP_PYTHON}), but the "
           "supported range is ${CUSTOMOP_TORCH_MIN_VERSION} to ${CUSTOMOP_TORCH_MAX_VERSION}. "
           "Point -DCUSTOMOP_PYTHON at a python with a supported torch (or set "
           "-DCUSTOMOP_ALLOW_UNSUPPORTED_TORCH=ON to try anyway)")
    if(CUSTOMOP_ALLOW_UNSUPPORTED_TORCH)
      message(WARNING "${_msg}")
    else()
      message(FATAL_ERROR "${_msg}")
    endif()
  endif()
endfunction()
customop_check_torch_version("${CUSTOMOP_TORCH_VERSION}")

set(_tlib "${CUSTOMOP_TORCH_ROOT}/lib")
add_library(customop_torch INTERFACE)
add_library(customop::torch ALIAS customop_torch)
target_include_directories(customop_torch SYSTEM INTERFACE
  "${CUSTOMOP_TORCH_ROOT}/include"
  "${CUSTOMOP_TORCH_ROOT}/include/torch/csrc/api/include")
target_compile_definitions(customop_torch INTERFACE
  _GLIBCXX_USE_CXX11_ABI=${CUSTOMOP_TORCH_CXX11_ABI})
# NB: libstdc++ goes first in DT_NEEDED, ahead of libtorch. The torch 2.11.0 wheel's libtorch.so
# exports its own copy of std::filesystem (64 symbols) which crashes (a call through a null
# pointer) when a program's std::filesystem::remove_all/create_directories binds to it; the
# dynamic linker takes the first library in load order that defines a symbol, so naming
# libstdc++ first binds those calls to the real one. (torch 2.12.1 exports none.)
# NB: libstdc++ is named by the path of the toolchain's shared library, never as -lstdc++: a
# non-system GCC (a cluster's own, conda-style, devtoolset) can resolve -lstdc++ to its static
# archive, which put a second libstdc++ (GCC 13.3's) inside libcustomop.so on the first GPU
# machine. The process's shared libstdc++ then ran on that copy's locale (facet ids differ
# between the two) and Python segfaulted while the ops registered (printing a schema's
# double). Where the compiler knows no shared libstdc++ (not GCC's runtime), -lstdc++ stays.
if(NOT DEFINED CUSTOMOP_LIBSTDCXX)
  execute_process(COMMAND "${CMAKE_CXX_COMPILER}" -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE _stdcxx OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT (IS_ABSOLUTE "${_stdcxx}" AND EXISTS "${_stdcxx}"))
    set(_stdcxx stdc++)
  endif()
  set(CUSTOMOP_LIBSTDCXX "${_stdcxx}" CACHE STRING
      "The C++ runtime every customop library links (the toolchain's shared libstdc++)")
endif()
target_link_libraries(customop_torch INTERFACE
  "-Wl,--push-state,--no-as-needed" "${CUSTOMOP_LIBSTDCXX}" "-Wl,--pop-state"
  "${_tlib}/libtorch.so" "${_tlib}/libtorch_cpu.so" "${_tlib}/libc10.so")
target_link_options(customop_torch INTERFACE "LINKER:-rpath,${_tlib}")
# NB: a shared library that links libtorch binds its calls to its own functions locally
# (-Bsymbolic-functions). Otherwise a call to an inline or template function (e.g.
# std::vector<bool>'s deallocate) goes to the first library in load order that exports one,
# and the CUDA wheel's libtorch loads libraries (libcusparseLt) that export their own copies;
# ASan reports their free() of our operator new as alloc-dealloc-mismatch.
# The C++ runtime stays private to each shared library: nothing linked from a static archive is
# exported (--exclude-libs,ALL: libgcc.a, a static libstdc++ part such as devtoolset's
# libstdc++_nonshared.a), and customop_runtime_symbols.map makes std::, __gnu_cxx:: and the
# C++ ABI's entry points local. ci/abi-audit checks every shipped library for both.
# CUSTOMOP_PRIVATE_RUNTIME=OFF drops the two (a library with a version script of its own).
option(CUSTOMOP_PRIVATE_RUNTIME "Hide the C++ runtime's symbols in shared libraries" ON)
set(_shared "$<IN_LIST:$<TARGET_PROPERTY:TYPE>,SHARED_LIBRARY;MODULE_LIBRARY>")
target_link_options(customop_torch INTERFACE "$<${_shared}:LINKER:-Bsymbolic-functions>")
if(CUSTOMOP_PRIVATE_RUNTIME)
  target_link_options(customop_torch INTERFACE
    "$<${_shared}:LINKER:--exclude-libs,ALL>"
    "$<${_shared}:LINKER:--version-script=${CMAKE_CURRENT_LIST_DIR}/customop_runtime_symbols.map>")
  # A changed version script relinks what links it.
  set_property(TARGET customop_torch APPEND PROPERTY INTERFACE_LINK_DEPENDS
               "${CMAKE_CURRENT_LIST_DIR}/customop_runtime_symbols.map")
endif()

# customop::torch_parallel: link it to a target whose CPU kernels call at::parallel_for.
# ATen's parallel_for is a header template; in a torch built with OpenMP (every Linux wheel:
# AT_PARALLEL_OPENMP in ATen/Config.h) its threads exist only where the calling file is
# compiled with OpenMP, and without that it runs the whole range on the calling thread, with
# no warning. This target compiles with -fopenmp and links torch's own libgomp.so.1 (the
# wheel's lib/ folder; same SONAME, so the process keeps one OpenMP runtime and
# at::set_num_threads governs our kernels too). Only GCC emits calls libgomp understands
# (Clang's OpenMP needs libomp, a second runtime): with another compiler the kernels stay on
# one thread and configure says so. A torch with ATen's native thread pool needs nothing.
# CUSTOMOP_TORCH_PARALLEL tells which case applies (openmp | native | serial); targets that
# link this one get CUSTOMOP_INTRA_OP_PARALLEL=1 when their kernels have threads.
add_library(customop_torch_parallel INTERFACE)
add_library(customop::torch_parallel ALIAS customop_torch_parallel)
target_link_libraries(customop_torch_parallel INTERFACE customop::torch)
file(STRINGS "${CUSTOMOP_TORCH_ROOT}/include/ATen/Config.h" _customop_omp
     REGEX "^#define AT_PARALLEL_OPENMP 1")
if(NOT _customop_omp)
  set(CUSTOMOP_TORCH_PARALLEL native)
elseif(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(CUSTOMOP_TORCH_PARALLEL openmp)
  target_compile_options(customop_torch_parallel INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fopenmp>)
  if(EXISTS "${_tlib}/libgomp.so.1")
    target_link_libraries(customop_torch_parallel INTERFACE "${_tlib}/libgomp.so.1")
  else()
    target_link_options(customop_torch_parallel INTERFACE -fopenmp)
  endif()
else()
  set(CUSTOMOP_TORCH_PARALLEL serial)
  message(STATUS "customop: ${CMAKE_CXX_COMPILER_ID} cannot share torch's OpenMP runtime "
                 "(libgomp): at::parallel_for in CPU kernels runs on one thread")
endif()
if(NOT CUSTOMOP_TORCH_PARALLEL STREQUAL "serial")
  target_compile_definitions(customop_torch_parallel INTERFACE CUSTOMOP_INTRA_OP_PARALLEL=1)
endif()

if(CUSTOMOP_ENABLE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  add_library(customop_torch_cuda INTERFACE)
  add_library(customop::torch_cuda ALIAS customop_torch_cuda)
  # NB: --no-as-needed keeps libtorch_cuda as a dependency even when nothing references it
  # directly; without it CUDA kernels registered by libtorch_cuda would not load.
  target_link_libraries(customop_torch_cuda INTERFACE customop::torch
    "-Wl,--no-as-needed" "${_tlib}/libtorch_cuda.so" "${_tlib}/libc10_cuda.so" "-Wl,--as-needed"
    CUDA::cudart)
  target_compile_definitions(customop_torch_cuda INTERFACE CUSTOMOP_WITH_CUDA=1)
  # libtorch_cuda's own dependencies (NCCL, cuDNN, cuSPARSELt, NVSHMEM, the cu13 runtime) live
  # in the wheel's sibling nvidia/ packages; the loader finds them through libtorch's RPATH, the
  # linker needs to be told where they are to resolve their symbols.
  file(GLOB _nvidia_lib_dirs LIST_DIRECTORIES true "${CUSTOMOP_TORCH_ROOT}/../nvidia/*/lib")
  foreach(_dir IN LISTS _nvidia_lib_dirs)
    target_link_options(customop_torch_cuda INTERFACE "LINKER:-rpath-link,${_dir}")
  endforeach()
endif()
