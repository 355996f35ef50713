#pragma once
// A differentiable output that is NaN or infinite at the sample point: no derivative exists
// there to check, and the finite differences around it are not finite, so the Jacobian check
// fails without saying that the forward, not the backward, gave the non-finite value.

#include "detail/checker.h"

#include <customop/gradcheck/result.h>

namespace customop::gradcheck::detail {

/// Where `result` holds a first-order Jacobian failure that the singular-point moves
/// (singular_points.h, which move the point off a log(0) or a removable 0/0 and check again)
/// left standing, and a differentiable output of `checked` (the forward at the sample point) is
/// NaN or infinite: adds a forward_error failure, first in result.failures, headline "the
/// function returned a non-finite value", naming the first such output, its element and value
/// and how many elements are not finite. The Jacobian failures stay (a backward may be wrong
/// too).
void report_nonfinite_outputs(const Checked& checked, GradcheckResult& result);

}  // namespace customop::gradcheck::detail
