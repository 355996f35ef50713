#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

namespace customop::gradcheck {

std::string_view mode_name(Mode mode) { return mode == Mode::kFast ? "fast" : "slow"; }

std::string_view low_precision_method_name(LowPrecisionMethod method) {
  switch (method) {
    case LowPrecisionMethod::kAuto: return "auto";
    case LowPrecisionMethod::kFloat64Reference: return "float64-reference";
    case LowPrecisionMethod::kRidders: return "ridders";
    case LowPrecisionMethod::kCentral: return "central";
  }
  return "?";
}

Tolerances default_tolerances(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return {1e-6, 1e-4, 2e-3, false};
    case c10::ScalarType::Half: return {1e-6, 1e-2, 1e-2, false};
    case c10::ScalarType::BFloat16: return {1e-6, 1e-1, 1e-1, false};
    default: return {1e-6, 1e-5, 1e-3, false};
  }
}

Tolerances resolve_tolerances(const GradcheckOptions& options, c10::ScalarType dtype) {
  Tolerances t = default_tolerances(dtype);
  if (options.eps) t.eps = *options.eps;
  if (options.atol) t.atol = *options.atol;
  if (options.rtol) t.rtol = *options.rtol;
  t.estimated = !options.atol && !options.rtol;
  return t;
}

std::string_view check_name(Check check) {
  switch (check) {
    case Check::kJacobian: return "jacobian";
    case Check::kNotDifferentiable: return "not_differentiable";
    case Check::kReentrancy: return "reentrancy";
    case Check::kGradOutputScaling: return "grad_output_scaling";
    case Check::kUndefinedGrad: return "undefined_grad";
    case Check::kGradMetadata: return "grad_metadata";
    case Check::kOutputStability: return "output_stability";
    case Check::kForwardGradMode: return "forward_grad_mode";
    case Check::kNonDifferentiableOutput: return "nondifferentiable_output";
    case Check::kBackwardError: return "backward_error";
    case Check::kCudaVsCpu: return "cuda_vs_cpu";
    case Check::kFakeKernel: return "fake_kernel";
    case Check::kLayout: return "layout";
    case Check::kForwardError: return "forward_error";
    case Check::kInputSubset: return "input_subset";
    case Check::kLowPrecision: return "low_precision";
    case Check::kMutation: return "mutation";
    case Check::kOutVariant: return "out_variant";
    case Check::kInplaceVariant: return "inplace_variant";
    case Check::kTransforms: return "transforms";
  }
  return "?";
}

bool GradcheckResult::failed(Check check) const {
  for (const auto& f : failures) {
    if (f.check == check) return true;
  }
  return false;
}

}  // namespace customop::gradcheck
