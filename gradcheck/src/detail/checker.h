#pragma once
// The checks of one Function at one point: Jacobians (slow or fast), reentrancy, grad
// metadata, grad_output scaling, undefined grads, forward under grad mode, outputs not
// connected to inputs. Used for the first order and, on (inputs, grad_outputs) -> grads,
// for the second order. Internal to customop_gradcheck.

#include "detail/function.h"
#include "detail/numerical.h"

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace customop::gradcheck::detail {

struct CheckConfig {
  Mode mode = Mode::kSlow;
  Tolerances tol{};
  double nondet_tol = 0;
  std::uint64_t seed = 0;
  bool check_undefined_grad = true;
  bool check_grad_output_scaling = true;
  bool check_grad_metadata = true;
  bool check_forward_grad_mode = true;
  bool detect_nondifferentiable = true;
  bool keep_jacobians = false;
  std::int64_t max_jacobian_entries = std::int64_t{1} << 24;
  LowPrecisionMethod low_precision = LowPrecisionMethod::kAuto;
  double ridders_initial_step = 1e-2;
  double ridders_shrink = 2.0;
  int ridders_levels = 6;
  bool second_order = false;  // marks failures and fills second_order_pairs
};

/// What the first-order pass leaves for the passes after it.
struct Checked {
  std::vector<at::Tensor> leaves;   // the inputs that required grad (fresh leaves)
  std::vector<at::Tensor> outputs;  // f(leaves) under grad mode, flat
  std::vector<std::size_t> diff;    // indices of the differentiable outputs in `outputs`
  std::vector<std::string> output_names;
};

/// Runs every check of `f` at `point` and records them in `result`. The function's own errors
/// (from its forward) propagate; backward errors become failures.
Checked check_function(const Function& f, const std::vector<at::Tensor>& point,
                       const CheckConfig& cfg, GradcheckResult& result);

/// One backward pass; counts it.
std::vector<at::Tensor> vjp(const std::vector<at::Tensor>& outputs,
                            const std::vector<at::Tensor>& grad_outputs,
                            const std::vector<at::Tensor>& inputs, OpCounts& counts,
                            bool create_graph = false);

/// Adds a failure and marks the result failed.
void add_failure(GradcheckResult& result, Check check, bool second_order, int output, int input,
                 std::string headline, std::string detail = {});

/// Least precise floating dtype among `tensors` (float64 when all are).
c10::ScalarType lowest_precision(const std::vector<at::Tensor>& tensors);

/// "1.234568e-03".
std::string sci(double v);

}  // namespace customop::gradcheck::detail
