#pragma once
// The layout-variant check: the op at the same point with one input, or one grad_output, in
// a non-contiguous layout must give the outputs and grads of the given layout. It catches
// kernels that read memory as if it were contiguous (data_ptr() without the strides), which
// finite differences on one layout never see. Internal to customop_gradcheck.

#include "detail/checker.h"
#include "detail/function.h"

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace customop::gradcheck::detail {

/// Runs the variants of every differentiable input (`c.leaves`) and output (`c.diff`):
///   - "strided": every second element of a buffer twice as long in the last dim, whose other
///     elements are NaN (a kernel reading past the view's strides sees NaN);
///   - "transposed": the last two dims stored swapped (2-D and more, when not contiguous then);
/// an input variant is evaluated under grad mode and its outputs and grads (for seeded
/// grad_outputs) compared with the given layout's; a grad_output variant is handed to the
/// VJP of the given layout's outputs and its grads compared. Equal means equal to rounding:
/// |a - b| <= 16 (4 + sqrt(K)) eps(dtype) max(1, max |b|, max |input|), K the largest input's
/// element count (a reduction summed in another order rounds differently) (+ `nondet_tol` for
/// grads, which a backward may vary by), NaN where the other has NaN; grads are not compared when
/// the reentrancy check failed (a nondeterministic backward says nothing about layouts). `f` counts
/// its forward calls into result.layout_counts; the VJPs are counted there too. A mismatch is a
/// Check::kLayout failure naming the variant and the argument; an error raised only for the
/// variant (a kernel that demands contiguous inputs) is a note, not a failure: it is loud, not
/// wrong. Records the variants that ran in result.layout_variants.
///
/// An op whose result legitimately depends on its input's strides (as_strided and its
/// family read the storage through strides they are given) changes its outputs under an input
/// variant too. So where an input variant changes the outputs, `jacobian_at` (when given)
/// runs the Jacobian check at the point with that input in that layout (its gaps zero): if
/// the op's backward agrees with its own forward there, the op is stride-dependent and
/// consistent, which is a note (its grads are not compared either); if not, the failure
/// stands. A kernel that reads memory as if contiguous fails there too: finite differences
/// move the logical elements, which such a kernel reads at other positions.
using JacobianAt = std::function<bool(const std::vector<at::Tensor>& point)>;
void check_layout_variants(const Function& f, const Checked& c, std::uint64_t seed,
                           double nondet_tol, GradcheckResult& result,
                           const JacobianAt& jacobian_at = {});

}  // namespace customop::gradcheck::detail
