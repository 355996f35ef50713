#pragma once
/// \file
/// Test helpers for asserting on the errors customop throws: the message of the exception a
/// callable throws, and the "file:line" a registration reports.

#include <c10/util/Exception.h>
#include <c10/util/Type.h>
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <utility>

namespace customop::testing {

/// Runs `fn` and returns the message of the `E` (c10::Error by default) it throws.
/// When `fn` returns normally it records a test failure and returns "<no exception>", so a
/// HasSubstr matcher on the result fails as well; any other exception propagates to gtest.
/// Example:
///   EXPECT_THAT(error_message([&] { op(args); }), HasSubstr("no CPU impl registered"));
template <class E = c10::Error, class F>
std::string error_message(F&& fn) {
  try {
    std::forward<F>(fn)();
  } catch (const E& e) {
    // The message only: c10::Error's what() also carries a C++ backtrace.
    if constexpr (std::is_base_of_v<c10::Error, E>) {
      return e.what_without_backtrace();
    } else {
      return e.what();
    }
  }
  ADD_FAILURE() << "expected a " << c10::demangle_type<E>() << " but nothing was thrown";
  return "<no exception>";
}

}  // namespace customop::testing

/// "file:line" of line `line` in the including file, as customop::format_location writes a
/// std::source_location taken there. NB: keep the registration and __LINE__ on one line.
#define CUSTOMOP_TEST_LOCATION(line) (std::string(__FILE__) + ":" + std::to_string(line))
