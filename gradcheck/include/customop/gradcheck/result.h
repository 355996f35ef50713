#pragma once
/// \file
/// `customop::gradcheck::GradcheckResult`: what a gradient check found, per (output, input)
/// pair and per argument, which checks failed, and how many op evaluations it took.

#include <customop/gradcheck/options.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace customop::gradcheck {

/// The checks a gradient check makes; a Failure names one.
enum class Check : std::uint8_t {
  kJacobian,                 ///< analytical and numerical Jacobians differ
  kNotDifferentiable,        ///< the mismatch sits where left and right differences disagree
  kReentrancy,               ///< two backward runs disagree by more than nondet_tol
  kGradOutputScaling,        ///< zero grad_outputs gave non-zero grads
  kUndefinedGrad,            ///< backward failed on, or mishandled, undefined output grads
  kGradMetadata,             ///< a grad's dtype, device or shape differs from its input's
  kOutputStability,          ///< outputs changed shape/dtype/count when inputs were perturbed
  kForwardGradMode,          ///< forward differs with and without grad mode
  kNonDifferentiableOutput,  ///< no output requires grad, yet the numerical Jacobian is not 0
  kBackwardError,            ///< backward raised an error
  kCudaVsCpu,                ///< CUDA outputs or grads differ from the CPU ones
  kFakeKernel,               ///< the fake (Meta) kernel's outputs differ in count, shape,
                             ///< dtype, strides or device from the real kernel's, or it raised
  kLayout,        ///< an input or grad_output in a non-contiguous layout changed outputs or grads
  kForwardError,  ///< the function itself raised an error (at the point, or perturbed)
  kInputSubset,   ///< with only some inputs requiring grad, their grads changed (or it raised)
};

/// Names a check, as JSON spells it.
/// \param check  the check
/// \returns a stable short name: "jacobian", "reentrancy", ...
/// \throws nothing.
/// Example:
///   std::cout << customop::gradcheck::check_name(r.failures[0].check);
std::string_view check_name(Check check);

/// One failed check.
struct Failure {
  Check check;
  bool second_order = false;  ///< found by the second-order (gradgradcheck) pass
  int output = -1;            ///< differentiable-output index i, or -1
  int input = -1;             ///< differentiable-input index j, or -1
  std::string headline;  ///< one line, e.g. "Jacobian mismatch for output 0 with respect to input 1
                         ///< ('weight')"
  std::string detail;    ///< further lines (may be empty)
};

/// One Jacobian entry, the worst of a pair.
struct ElementReport {
  std::vector<int64_t> output_index;  ///< index into the output (its shape)
  std::vector<int64_t> input_index;   ///< index into the input (its shape)
  double numerical = 0;
  double analytical = 0;
  double abs_error = 0;
  double rel_error = 0;       ///< abs_error / |numerical|; abs_error where numerical is exactly 0
  double tolerance = 0;       ///< what |analytical - numerical| may reach: error_estimate +
                              ///< rounding_bound (Tolerances: estimated rule), or atol + rtol *
                              ///< |numerical| + the extrapolation's error estimate (fixed rule)
  double error_estimate = 0;  ///< the numerical side's error estimate, safety factor included
  double rounding_bound = 0;  ///< the analytical side's rounding bound, safety factor included
                              ///< (0 under the fixed rule)
};

/// The comparison of one (differentiable output i, differentiable input j) block.
struct PairReport {
  int output = 0;           ///< i: counts differentiable outputs only
  int input = 0;            ///< j: counts inputs that require grad only
  std::string output_name;  ///< schema return name, or "output <k>"
  std::string input_name;   ///< schema argument name, "xs[1]" for a list element
  bool passed = true;
  bool projected = false;   ///< fast mode: one entry, v^T J u
  int64_t entries = 0;      ///< entries compared
  int64_t bad_entries = 0;  ///< entries out of tolerance (non-differentiable ones included)
  int64_t nondifferentiable_entries = 0;  ///< bad entries at non-differentiable points
  /// Entries at a kink within the step whose analytical value lies between the one-sided
  /// derivatives: accepted (estimated rule, detect_nondifferentiable), and noted.
  int64_t kink_entries = 0;
  /// Entries whose numerical error estimate exceeds 1 % of the largest |numerical| of their
  /// row (estimated rule): the differences cannot tell a 1 % error there (e.g. float32 central
  /// differences at eps 1e-6); noted.
  int64_t loose_entries = 0;
  double worst_abs_error = 0;
  double worst_rel_error = 0;
  ElementReport worst;  ///< the entry furthest beyond its tolerance (or the largest error)
  /// [output numel, input numel] float64 CPU, kept for failing pairs (for heatmaps) or with
  /// keep_jacobians; undefined otherwise.
  at::Tensor numerical;
  at::Tensor analytical;
  at::Tensor tolerance;  ///< [output numel, input numel]: each entry's tolerance (slow mode)
};

/// The per-argument table: one row per differentiable input, over all outputs.
struct ArgumentSummary {
  int input = 0;
  std::string name;
  int64_t entries = 0;
  int64_t bad_entries = 0;
  double worst_abs_error = 0;
  double worst_rel_error = 0;
};

/// Op evaluations a check spent, to compare with torch.autograd.gradcheck's cost.
struct OpCounts {
  int64_t forward_calls = 0;  ///< calls of the op's forward (any device, any dtype)
  int64_t vjp_calls = 0;      ///< backward passes (torch::autograd::grad calls)
};

/// The outcome of one gradient check.
struct GradcheckResult {
  bool passed = true;
  std::string op;      ///< qualified op name ("ns::name")
  std::string label;   ///< sample label (GradcheckOptions::label)
  std::string device;  ///< "cpu", "cuda:0"
  std::string dtype;   ///< least precise differentiable input dtype, "float64"
  Mode mode = Mode::kSlow;
  std::uint64_t seed = 0;
  std::string method;  ///< numerical method: "central", "central (float64 reference)", "ridders"
  Tolerances tolerances{};
  double nondet_tol = 0;
  std::vector<std::string> inputs;   ///< names of the differentiable inputs, index j
  std::vector<std::string> outputs;  ///< names of the differentiable outputs, index i
  std::vector<PairReport> pairs;     ///< first order, one per (i, j)
  std::vector<PairReport> second_order_pairs;
  std::vector<ArgumentSummary> arguments;
  std::vector<Failure> failures;   ///< in the order the checks ran; Jacobian ones first
  std::vector<std::string> notes;  ///< what was skipped or substituted, and why
  OpCounts counts;
  /// The layout variants that ran ("x: strided", "grad_output y: transposed"), and what they
  /// cost (apart from `counts`, which stays comparable with torch.autograd.gradcheck's).
  std::vector<std::string> layout_variants;
  OpCounts layout_counts;
  /// The input subsets checked (GradcheckOptions::input_subsets), e.g. "'x'", "every input
  /// but 'x'", and their cost, counted apart from `counts`.
  std::vector<std::string> input_subsets;
  OpCounts subset_counts;

  /// Formats this result as text (format_report in report.h).
  /// \returns the full report; its first line is the first failure's headline, or
  ///          "gradcheck passed"
  /// \throws nothing beyond std::bad_alloc.
  /// Example:
  ///   if (!r.passed) std::cerr << r.message();
  std::string message() const;
  /// Tells whether one kind of check failed.
  /// \param check  the check
  /// \returns true when a failure of `check` was recorded
  /// \throws nothing.
  /// Example:
  ///   EXPECT_FALSE(r.failed(customop::gradcheck::Check::kReentrancy));
  bool failed(Check check) const;
};

}  // namespace customop::gradcheck
