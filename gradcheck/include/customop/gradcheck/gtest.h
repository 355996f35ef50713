#pragma once
/// \file
/// GoogleTest assertions for gradient checks of customop ops in downstream test suites.
///
/// Example:
///   customop::gradcheck::GradcheckOptions fast;
///   fast.mode = customop::gradcheck::Mode::kFast;
///   EXPECT_GRADCHECK(my_op(), MyArgs{.x = torch::randn({3, 4}, torch::kDouble).requires_grad_()}, fast);
/// `op` is a customop::Op<Args, Ret>& (or an OpCore / c10::OperatorHandle with a
/// torch::jit::Stack), `args` its args struct (brace initializers with commas are fine); the
/// options are optional. On failure the message is the full report (worst element, seed).

#include <customop/gradcheck/gradcheck.h>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <string>

namespace customop::gradcheck {

/// The assertion behind EXPECT_GRADCHECK: success when every check passes; a failure (not an
/// exception) when a check fails or the inputs are invalid. The op's own errors propagate.
template <class OpT, class ArgsT>
::testing::AssertionResult gtest_gradcheck(const char* op_text, const OpT& op, const ArgsT& args,
                                           GradcheckOptions options = {}) {
  options.raise_exception = false;
  try {
    const GradcheckResult r = gradcheck(op, args, options);
    if (r.passed) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "gradcheck of " << op_text << " failed (seed " << options.seed << "):\n"
           << r.message();
  } catch (const c10::ValueError& e) {
    return ::testing::AssertionFailure()
           << "gradcheck of " << op_text << " rejected its inputs: " << e.what_without_backtrace();
  }
}

}  // namespace customop::gradcheck

/// Non-fatal: EXPECT_GRADCHECK(op, args[, options]).
#define EXPECT_GRADCHECK(op, ...)                                             \
  GTEST_ASSERT_(::customop::gradcheck::gtest_gradcheck(#op, op, __VA_ARGS__), \
                GTEST_NONFATAL_FAILURE_)
/// Fatal: ASSERT_GRADCHECK(op, args[, options]).
#define ASSERT_GRADCHECK(op, ...) \
  GTEST_ASSERT_(::customop::gradcheck::gtest_gradcheck(#op, op, __VA_ARGS__), GTEST_FATAL_FAILURE_)
