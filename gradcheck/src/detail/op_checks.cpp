// The runner of the checks that call a dispatcher op on copies of a sample (op_checks.h).

#include "detail/op_checks.h"

#include "detail/function.h"
#include "detail/stack_tensors.h"

#include <customop/gradcheck/gradcheck.h>

namespace customop::gradcheck::detail {

std::optional<torch::jit::Stack> functional_result(const c10::OperatorHandle& op,
                                                   const torch::jit::Stack& args) {
  const at::NoGradGuard no_grad;
  torch::jit::Stack call = clone_stack_detached(args);
  try {
    op.callBoxed(call);
  } catch (const std::exception&) {
    note_caught_error();
    return std::nullopt;
  }
  return call;
}

const std::vector<const OpCheck*>& op_checks() {
  static const std::vector<const OpCheck*> checks = {&kMutationCheck, &kFakeKernelCheck,
                                                     &kOutVariantCheck, &kInplaceVariantCheck,
                                                     &kTransformsCheck};
  return checks;
}

GradcheckResult with_op_checks(
    const c10::OperatorHandle& op, const torch::jit::Stack& args, const GradcheckOptions& options,
    const std::function<GradcheckResult(const GradcheckOptions&)>& gradient_checks) {
  const auto& schema = op.schema();
  GradcheckResult r;
  if (schema.is_mutable()) {
    const std::string& overload = schema.overload_name();
    r.op = schema.name() + (overload.empty() ? "" : "." + overload);
    r.label = options.label;
    r.mode = options.mode;
    r.seed = options.seed;
    for (const auto& v : args) {
      if (v.isTensor() && v.toTensor().defined()) {
        r.device = v.toTensor().device().str();
        r.dtype = std::string(c10::getDtypeNames(v.toTensor().scalar_type()).first);
        break;
      }
    }
    r.notes.push_back("no gradient check: " + r.op +
                      " writes arguments in place (Tensor(a!)); customop refuses written "
                      "tensors that require grad, so there is no backward to check");
  } else {
    GradcheckOptions inner = options;
    inner.raise_exception = false;
    r = gradient_checks(inner);
  }
  for (const OpCheck* check : op_checks()) {
    std::string why_not;
    if (check->enabled(op, options, why_not)) {
      check->run(op, args, r);
    } else {
      r.notes.push_back(std::string(check->name) + ": not checked (" + why_not + ")");
    }
  }
  if (!r.passed && options.raise_exception) throw GradcheckError(r);
  return r;
}

}  // namespace customop::gradcheck::detail
