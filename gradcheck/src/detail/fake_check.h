#pragma once
// The fake-kernel check of GradcheckOptions::check_fake_kernel. Internal to customop_gradcheck.

#include <ATen/core/dispatch/Dispatcher.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/stack.h>

namespace customop::gradcheck::detail {

/// Runs `op` on `args` (grad mode off, inputs detached; copies for an op that writes its
/// arguments) and on meta copies of them (same sizes, strides and dtypes), and adds one
/// kFakeKernel failure to `result` per mismatch:
/// output count or kind, shape, dtype, strides (of dims of size > 1; dims of size 0 or 1
/// impose no layout), device (meta for the fake call, the inputs' device for the real one),
/// or when the fake kernel raises. Adds nothing when the real call raises: the other checks
/// report that. When the sample agrees, does the same on each of shape_variants(args) the
/// real kernel accepts, up to the first that differs, and adds a note counting them.
/// Works on any dispatcher op with a Meta kernel.
void check_fake_kernel(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                       GradcheckResult& result);

}  // namespace customop::gradcheck::detail
