# cmake.unsupported_torch: configuring against a torch outside the supported range stops with
# one line naming the found and the supported versions. Run with -P; SOURCE_DIR, BINARY_DIR.
file(REMOVE_RECURSE "${BINARY_DIR}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${BINARY_DIR}" -G Ninja
          -DCUSTOMOP_ENABLE_CUDA=OFF
          "-DCUSTOMOP_PYTHON=${SOURCE_DIR}/tests/cmake/fake_python_old_torch.sh"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(REMOVE_RECURSE "${BINARY_DIR}")
string(REGEX REPLACE "[ \n]+" " " text "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "configure succeeded against torch 2.10.0:\n${out}${err}")
endif()
set(expect "customop: found torch 2.10.0+cpu")
string(FIND "${text}" "${expect}" at1)
string(FIND "${text}" "supported range is 2.11 to 2.15" at2)
if(at1 EQUAL -1 OR at2 EQUAL -1)
  message(FATAL_ERROR "configure failed without naming the found and supported versions:\n${out}${err}")
endif()
message(STATUS "refused as expected: ${expect} ... the supported range is 2.11 to 2.15")
