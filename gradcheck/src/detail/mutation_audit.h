#pragma once
// The mutation audit of GradcheckOptions::check_mutation. Internal to customop_gradcheck.

#include <customop/gradcheck/result.h>

#include <customop/gradcheck/options.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>

namespace customop::gradcheck::detail {

/// Calls `op` once (grad mode off) on copies of `args` whose tensors each sit in a private
/// copy of their argument's whole base storage, and compares every storage byte for byte
/// before and after. Adds one kMutation failure to `result` per:
///   - argument written although the schema does not declare it (`Tensor(a!)`), naming the
///     argument, the first changed element (index into the argument, or "outside its view":
///     storage element k) and its value before and after;
///   - declared written argument changed outside its own view (a kernel that writes as if it
///     were contiguous);
///   - output that shares storage with an argument.
/// Adds a note per declared write that did not happen on this sample, and one summing up
/// what the audit saw. Adds nothing when the call raises: the other checks report that.
/// Works on any dispatcher op (customop's or not) and any device.
void audit_mutation(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                    GradcheckResult& result);

/// Every entry point of the harness for a dispatcher op goes through here:
///   - an op whose schema declares a write (Tensor(a!)) gets no gradient checks (customop
///     refuses written tensors that require grad; the report's notes say so, and it is not a
///     failure), only the mutation audit;
///   - any other op runs `gradient_checks` (with raise_exception off), then the audit.
/// The audit runs when options.check_mutation. Throws GradcheckError when the result failed
/// and options.raise_exception.
GradcheckResult with_mutation_checks(
    const c10::OperatorHandle& op, const torch::jit::Stack& args, const GradcheckOptions& options,
    const std::function<GradcheckResult(const GradcheckOptions&)>& gradient_checks);

}  // namespace customop::gradcheck::detail
