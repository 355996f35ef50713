#pragma once
// Sample points at a singularity: not a failure of the op, and not a point where finite
// differences can judge it. Internal to customop_gradcheck.

#include "detail/function.h"

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace customop::gradcheck::detail {

/// Where the Jacobian failures of a first-order check (`result`, from check_function at
/// `point`) are all at a singularity (a mismatch whose worst entry's numerical value is not
/// finite: f is not finite within the step, as log or sqrt at 0, asin at 1), the input
/// element named by the worst entry is reported as "not differentiable here" with its reason
/// and moved by kMoveSteps steps (kMoveSteps * eps * max(1, |x|); first up, then,
/// if the same element fails there, down), and the Jacobian check runs again at the moved
/// point. Up to kMaxMoves elements move, one per rerun. The check's Jacobian verdict and pairs
/// are then those of the last point: a pass there is a note per moved element; a failure there
/// (a wrong derivative away from the singularity) stands as that point's failures, with the
/// notes.
/// Kinks are judged where they are (compare.h): an analytical value between the one-sided
/// derivatives passes with a note, one outside them (relu's backward giving 5 at 0: no limit of
/// f supports it) is a Check::kNotDifferentiable failure and is not moved.
/// The passes after the first order (layout variants, input subsets, the precision probe,
/// second order) still run at the given point: they compare values (equal infinities are
/// equal) or skip non-finite pairs (the probe); the opt-in second order can fail there again.
/// The checks on the same grads (reentrancy, grad_output scaling, undefined grads: a
/// non-finite grad fails them too) are decided by the rerun as well. Nothing moves when any
/// other check failed, or the rule is atol/rtol. The reruns' op evaluations are added to
/// result.counts.
void move_off_singular_points(const Function& f, const std::vector<at::Tensor>& point,
                              const GradcheckOptions& options, GradcheckResult& result);

/// How far an element moves, in steps of eps * max(1, |x|): far enough that the kink is
/// outside the step, near enough to stay in the sample's region.
inline constexpr double kMoveSteps = 1000.0;
inline constexpr int kMaxMoves = 4;

}  // namespace customop::gradcheck::detail
