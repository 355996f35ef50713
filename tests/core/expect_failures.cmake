# Runs a gtest binary that was built against a sabotaged core and checks it FAILS: the exit
# status is non-zero and each test named in MUST_FAIL is reported failed (a crash or a
# missing binary is not enough: the named tests must have run and caught the sabotage).
#   cmake -D TEST_BINARY=<path> -D GTEST_FILTER=<filter> -D MUST_FAIL=<a;b> -P expect_failures.cmake
foreach(var TEST_BINARY GTEST_FILTER MUST_FAIL)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_failures.cmake: ${var} is not set")
  endif()
endforeach()
execute_process(COMMAND "${TEST_BINARY}" "--gtest_filter=${GTEST_FILTER}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "the suite passed against the sabotaged core; it does not catch the "
                      "sabotage:\n${out}${err}")
endif()
foreach(test IN LISTS MUST_FAIL)
  string(FIND "${out}" "[  FAILED  ] ${test}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${test} did not fail against the sabotaged core (exit status ${rc}):\n"
                        "${out}${err}")
  endif()
endforeach()
message(STATUS "the sabotaged core fails as expected (exit status ${rc}): ${MUST_FAIL}")
