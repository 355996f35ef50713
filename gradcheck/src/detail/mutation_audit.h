#pragma once
// The mutation audit of GradcheckOptions::check_mutation. Internal to customop_gradcheck.

#include <customop/gradcheck/result.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace customop::gradcheck::detail {

/// Calls `op` once (grad mode off) on copies of `args` whose tensors each sit in a private
/// copy of their argument's whole base storage, and compares every storage byte for byte
/// before and after. Adds one kMutation failure to `result` per:
///   - argument written although the schema does not declare it (`Tensor(a!)`), naming the
///     argument, the first changed element (index into the argument, or "outside its view":
///     storage element k) and its value before and after;
///   - declared written argument changed outside its own view (a kernel that writes as if it
///     were contiguous);
///   - declared written argument that changed while its version counter did not (no
///     ADInplaceOrView kernel: autograd cannot see the write);
///   - output that shares storage with an argument.
/// Adds a note per declared write that did not happen on this sample, and one summing up
/// what the audit saw. Adds nothing when the call raises: the other checks report that.
/// Works on any dispatcher op (customop's or not) and any device.
void audit_mutation(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                    GradcheckResult& result);

}  // namespace customop::gradcheck::detail
