#pragma once
// The checks of one Function at one point, one function each, in the order torch's gradcheck
// runs them: forward under grad mode (Ceres' extra), Jacobians (slow or fast; kinks reported as
// such) with the reentrancy and grad-metadata checks on the same VJPs, outputs not connected
// to any input, grad_output scaling, undefined output grads. Used for the first order and, on
// (inputs, grad_outputs) -> grads, for the second order. Internal to customop_gradcheck.

#include "detail/function.h"
#include "detail/vjp.h"

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace customop::gradcheck::detail {

/// Which derivative a check is of: failures of the second are marked "second order:" and its
/// pairs go to GradcheckResult::second_order_pairs.
enum class Order : std::uint8_t { kFirst, kSecond };

/// What the first-order pass leaves for the passes after it.
struct Checked {
  std::vector<at::Tensor> leaves;   // the inputs that required grad (fresh leaves)
  std::vector<at::Tensor> outputs;  // f(leaves) under grad mode, flat
  std::vector<std::size_t> diff;    // indices of the differentiable outputs in `outputs`
  std::vector<std::string> output_names;
};

/// Runs every check `options` asks for on `f` at `point`, with tolerances `tol` (already
/// resolved for the point's dtype), and records them in `result`. Errors of the function's
/// forward propagate as FunctionRaised (the caller reports them); backward errors become
/// failures. Throws c10::ValueError when slow mode would build more than
/// options.max_jacobian_entries entries.
Checked check_function(const Function& f, const std::vector<at::Tensor>& point,
                       const GradcheckOptions& options, const Tolerances& tol, Order order,
                       GradcheckResult& result);

/// Adds a failure and marks the result failed.
void add_failure(GradcheckResult& result, Check check, bool second_order, int output, int input,
                 std::string headline, std::string detail = {});

/// Least precise floating dtype among `tensors` (float64 when all are).
c10::ScalarType lowest_precision(const std::vector<at::Tensor>& tensors);

}  // namespace customop::gradcheck::detail
