#pragma once
// The input-subset check: a backward branches on which inputs need grad (torch's
// ctx.needs_input_grad, customop's output masks, an undefined grad for an input that does not
// require it), and a bug on a branch taken only when some inputs do not require grad is
// invisible while all of them do. Internal to customop_gradcheck.

#include "detail/checker.h"
#include "detail/function.h"

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <cstdint>

namespace customop::gradcheck::detail {

/// Runs the op again with only a subset of its differentiable inputs requiring grad (the
/// others as constants of the same values), for the subsets `which` names, and requires the
/// grads of that subset to equal, to rounding (equal_to_rounding.h, plus `nondet_tol`), the
/// grads with every input requiring grad, for one seeded dense random grad_output per
/// differentiable output (a one-hot one would leave most of a reduction's paths unused).
/// Its cost per subset: one forward call under grad mode and one VJP, counted in
/// result.subset_counts (plus one VJP for the reference grads). A mismatch, or an error raised
/// only for the subset, is a Check::kInputSubset failure naming the subset and the argument.
/// Nothing runs with fewer than 2 differentiable inputs, when no output is differentiable,
/// or when the reentrancy check failed (a nondeterministic backward says nothing about
/// paths). Records the subsets that ran in result.input_subsets ("x", "all but x").
void check_input_subsets(const Function& f, const Checked& c, InputSubsets which,
                         std::uint64_t seed, double nondet_tol, GradcheckResult& result);

}  // namespace customop::gradcheck::detail
