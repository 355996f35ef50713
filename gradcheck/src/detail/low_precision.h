#pragma once
// The float16/bfloat16 check (GradcheckOptions docs, options.h: "low-precision rule"): the
// function in the low dtype against a precise float64 run on the same rounded values, forward
// outputs and VJPs with dense random cotangents. Internal to customop_gradcheck.

#include "detail/function.h"

#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include <vector>

namespace customop::gradcheck::detail {

/// True for the dtypes the low-precision rule judges (float16, bfloat16).
bool is_low_precision(c10::ScalarType dtype);

/// Runs the low-precision check of `fn` at `point` (the differentiable inputs, of `low`
/// precision, at `slots` of `args`) and records it in `r`:
/// - without fn.reference: gradcheck of the function's own float64 run on the same values
///   first (its pairs, failures and notes go to `r`, failures prefixed "float64 run:"); it is
///   the precise run;
/// - the comparisons (one LowPrecisionReport per differentiable output and per input grad).
/// An error of the function in the low dtype is a kForwardError / kBackwardError failure; an
/// error of the precise run is a failure that says nothing could judge the kernel.
void check_low_precision(const BoxedFunction& fn, const torch::jit::Stack& args,
                         const std::vector<Slot>& slots, const std::vector<at::Tensor>& point,
                         c10::ScalarType low, const GradcheckOptions& options, GradcheckResult& r);

}  // namespace customop::gradcheck::detail
