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

/// Runs gradcheck as a GoogleTest assertion (the one behind EXPECT_GRADCHECK).
/// \param op_text  the op as written at the call site, for the failure message
/// \param op       any `op` gradcheck takes
/// \param args     the matching arguments (a torch::jit::Stack, or the args struct)
/// \param options  see GradcheckOptions; raise_exception is turned off here
/// \returns success when every check passes; a failure (the full report, with the seed) when
///          a check fails or the inputs are invalid (c10::ValueError)
/// \throws the op's own errors, unchanged.
/// Example:
///   EXPECT_TRUE(customop::gradcheck::gtest_gradcheck("scale_op()", scale_op(), args));
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

/// Non-fatal gradcheck assertion: EXPECT_GRADCHECK(op, args[, options]); see gtest_gradcheck.
/// Example:
///   EXPECT_GRADCHECK(scale_op(), ScaleArgs{.x = x.requires_grad_(), .alpha = 2.0});
#define EXPECT_GRADCHECK(op, ...)                                             \
  GTEST_ASSERT_(::customop::gradcheck::gtest_gradcheck(#op, op, __VA_ARGS__), \
                GTEST_NONFATAL_FAILURE_)
/// Fatal gradcheck assertion: ASSERT_GRADCHECK(op, args[, options]); see gtest_gradcheck.
/// Example:
///   ASSERT_GRADCHECK(scale_op(), ScaleArgs{.x = x.requires_grad_(), .alpha = 2.0});
#define ASSERT_GRADCHECK(op, ...) \
  GTEST_ASSERT_(::customop::gradcheck::gtest_gradcheck(#op, op, __VA_ARGS__), GTEST_FATAL_FAILURE_)
