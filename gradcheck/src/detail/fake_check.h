#pragma once
// The fake-kernel check of GradcheckOptions::check_fake_kernel. Internal to customop_gradcheck.

#include <customop/gradcheck/result.h>
#include <customop/op_core.h>

#include <ATen/core/stack.h>

namespace customop::gradcheck::detail {

/// Runs `op` on `args` (grad mode off, inputs detached) and on meta copies of them (same
/// sizes, strides and dtypes), and adds one kFakeKernel failure to `result` per mismatch:
/// output count or kind, shape, dtype, strides (of dims of size > 1; dims of size 0 or 1
/// impose no layout), device (meta for the fake call, the inputs' device for the real one),
/// or when the fake kernel raises. Adds nothing when the real call raises: the other checks
/// report that.
void check_fake_kernel(const OpCore& op, const torch::jit::Stack& args, GradcheckResult& result);

}  // namespace customop::gradcheck::detail
