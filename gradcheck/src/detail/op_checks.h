#pragma once
// The checks that run a dispatcher op itself, beside the gradient checks, and the runner that
// walks them. Internal to customop_gradcheck.
//
// A check is a unit: one file holds its run and its OpCheck entry (its name, when it is on, the
// note when it is off); op_checks.cpp lists the entries. Adding a check adds a file and a line
// to that list, and touches no other check.

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace customop::gradcheck::detail {

/// One check of a dispatcher op that calls the op on its own copies of a sample.
struct OpCheck {
  const char* name;  ///< as in the notes: "fake kernel", "mutation"
  /// Whether it runs for this op and these options; when it does not, `why_not` says why
  /// (a note in the report).
  bool (*enabled)(const c10::OperatorHandle& op, const GradcheckOptions& options,
                  std::string& why_not);
  /// Adds failures and notes to `result`; never throws for what the op does.
  void (*run)(const c10::OperatorHandle& op, const torch::jit::Stack& args,
              GradcheckResult& result);
};

/// The fake (Meta) kernel against the real one, on the sample and a sweep of its sizes and
/// layouts (fake_check.cpp).
extern const OpCheck kFakeKernelCheck;
/// The byte-for-byte audit of what the op writes (mutation_audit.cpp).
extern const OpCheck kMutationCheck;
/// The out= overload against the functional op (out_variant_check.cpp).
extern const OpCheck kOutVariantCheck;
/// The in-place variant (ns::name_) against the functional op (inplace_variant_check.cpp).
extern const OpCheck kInplaceVariantCheck;
/// The op under torch.func's transforms, vmap fallback off (transforms_check.cpp).
extern const OpCheck kTransformsCheck;

/// The functional op called on detached clones of `args` under no grad: the reference the
/// out= and in-place checks compare with. std::nullopt when it throws (the gradient checks
/// report the op's own error; the throw is counted by note_caught_error).
std::optional<torch::jit::Stack> functional_result(const c10::OperatorHandle& op,
                                                   const torch::jit::Stack& args);

/// The checks with_op_checks runs, in order.
const std::vector<const OpCheck*>& op_checks();

/// Every entry point of the harness for a dispatcher op goes through here:
///   - an op whose schema declares a write (Tensor(a!)) gets no gradient checks (customop
///     refuses written tensors that require grad; the report's notes say so, and it is not a
///     failure);
///   - any other op runs `gradient_checks` (with raise_exception off);
/// then each of op_checks() that is enabled. Throws GradcheckError when the result failed and
/// options.raise_exception.
GradcheckResult with_op_checks(
    const c10::OperatorHandle& op, const torch::jit::Stack& args, const GradcheckOptions& options,
    const std::function<GradcheckResult(const GradcheckOptions&)>& gradient_checks);

}  // namespace customop::gradcheck::detail
