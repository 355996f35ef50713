#pragma once
/// \file
/// `customop::gradcheck::GradcheckResult`: what a gradient check found, per (output, input)
/// pair and per argument, which checks failed, and how many op evaluations it took.

#include <customop/gradcheck/options.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>
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
  kLayout,          ///< an input or grad_output in a non-contiguous layout changed outputs or grads
  kForwardError,    ///< the function itself raised an error (at the point, or perturbed)
  kInputSubset,     ///< with only some inputs requiring grad, their grads changed (or it raised)
  kLowPrecision,    ///< a float16/bfloat16 output or grad is further from the precise run than
                    ///< the low-precision rule allows (LowPrecisionReport)
  kMutation,        ///< an argument the schema does not declare written (Tensor(a!)) changed, a
                    ///< written one changed outside its view, or an output aliases an argument
  kOutVariant,      ///< the out= overload's results differ from the functional op's (poisoned,
                    ///< non-contiguous, empty or wrong-size buffers), or its schema breaks the
                    ///< out= rules
  kInplaceVariant,  ///< the in-place variant (ns::name_, Tag.inplace) wrote something other
                    ///< than the functional op's result, did not return its first argument,
                    ///< restrided it, or left its version counter unchanged
  kTransforms,      ///< under torch.func's transforms (jvp, vmap, vmap(vjp); vmap fallback
                    ///< off) the op disagrees with its untransformed self, or raises
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
  /// The backward run in float64 at the same point, where it decided the verdict (a float32
  /// or 16-bit backward within its block's rounding bound, but as far off as its float64 run;
  /// detail/compare.h); NaN otherwise.
  double float64_analytical = std::numeric_limits<double>::quiet_NaN();
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
  /// [input numel] bool CPU: the input elements with an entry accepted at a kink (slow mode,
  /// when kink_entries > 0); undefined otherwise. The float64 precision probe leaves them out.
  at::Tensor kink_inputs;
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

/// The low-precision comparison of one output or one grad (float16/bfloat16 checks): the op
/// in the low dtype against the precise run on the same rounded values. The rule is in
/// options.h (low-precision rule); every figure is in the tensor's units, float64.
struct LowPrecisionReport {
  std::string what;  ///< "output 'y'" or "grad of 'x'"
  int output = -1;   ///< differentiable-output index (forward comparisons), else -1
  int input = -1;    ///< differentiable-input index (grads), else -1
  bool passed = true;
  std::string failed_rule;  ///< "max", "rms", "bias", "non-finite", "metadata", or "" (passed)
  int64_t elements = 0;     ///< elements compared (finite in both runs)
  std::vector<int64_t> worst_index;  ///< where |error| is largest
  double worst_value = 0;            ///< the low-precision run there
  double worst_precise = 0;          ///< the precise run there
  double max_error = 0;              ///< max |low - precise|
  double max_bound = 0;              ///< what max_error may reach
  double rms_error = 0;              ///< root-mean-square of low - precise
  double rms_bound = 0;              ///< what rms_error may reach
  double bias = 0;             ///< s = sum(e p) / sum(p^2): the error's systematic relative part
  double bias_bound = 0;       ///< what |bias| may reach
  double reference_error = 0;  ///< max |reference in the low dtype - precise|; 0 without one
  /// What the low run was judged against: "precise" (the precise run), or "saved rounded"
  /// (no-reference rule: the float64 run with its saved tensors rounded to the dtype, which a
  /// kernel that keeps what it saves for backward in the dtype matches; judged there when the
  /// precise run rejects the tensor).
  std::string baseline = "precise";
  /// No-reference rule: max |saved-rounded run - precise run| (what rounding the saved tensors
  /// moves the tensor by); 0 with a reference.
  double saved_rounding_error = 0;
  double perturbation_error = 0;  ///< max response of the precise run to one rounding of its
                                  ///< inputs and cotangent
  /// |low - precise| per element, float64 CPU, the tensor's shape (+inf where the kernel alone
  /// is not finite); kept for failed comparisons only, for heatmaps (write_heatmaps).
  at::Tensor error;
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
  /// The inputs the float64 precision probe ran on (GradcheckOptions::check_backward_precision)
  /// and what it cost, apart from `counts`.
  std::vector<std::string> precision_probes;
  OpCounts precision_counts;
  /// float16/bfloat16 checks: "reference" (the op's declared reference in float64 is the
  /// precise run) or "no reference" (the op's own float64 run, finite-difference checked
  /// first: `pairs` are its Jacobians); "" for float32/float64 checks.
  std::string precision_rule;
  /// float16/bfloat16 checks: one report per differentiable output and per input grad.
  std::vector<LowPrecisionReport> low_precision;
  OpCounts low_precision_counts;  ///< what the low-precision comparison cost (apart)

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
