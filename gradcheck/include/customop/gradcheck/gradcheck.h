#pragma once
/// \file
/// `customop::gradcheck::gradcheck`: checks an op's backward against finite differences of
/// its forward, as torch.autograd.gradcheck does, plus the checks it leaves to its users.
///
/// Example:
///   auto& op = customop::define<ScaleArgs>("myns::scale(Tensor x, float alpha) -> Tensor");
///   ...
///   auto r = customop::gradcheck::gradcheck(op, ScaleArgs{x.requires_grad_(), 5.0});
///   if (!r.passed) std::cerr << r.message();

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>
#include <customop/op.h>
#include <customop/op_core.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace customop::gradcheck {

/// Thrown by a failed check when GradcheckOptions::raise_exception is on; what() is the full
/// report (first line: the first failure's headline).
class GradcheckError : public std::runtime_error {
 public:
  explicit GradcheckError(GradcheckResult result);
  const GradcheckResult& result() const { return result_; }

 private:
  GradcheckResult result_;
};

/// Sets the function the harness calls each time it catches an error raised by the checked
/// function (its forward, backward or fake kernel), before it turns the error into a failed
/// check. For interpreters that embed the harness: torch's Python autograd engine leaves the
/// Python error of a raising Python backward set when it rethrows it to C++, and Python
/// refuses any later call while it is set; customop's Python package takes it off there.
/// \param hook  returns what to add to the error's message (e.g. "ValueError, raised at
///              ops.py:42 in backward"), or ""; safe to call from any thread running a check;
///              nullptr for none
/// \throws nothing.
/// Example:
///   customop::gradcheck::set_caught_error_hook(+[] { return std::string(); });
void set_caught_error_hook(std::string (*hook)());

/// Any boxed callable: what gradcheck needs to know about a function it did not get as a
/// dispatcher op.
struct BoxedFunction {
  std::string name;                       ///< shown in every message, e.g. "ns::op"
  std::vector<std::string> arg_names;     ///< one per argument of the stack
  std::vector<std::string> return_names;  ///< one per return; empty names become "output <k>"
  /// Pops the arguments off the stack and pushes the returns (c10::OperatorHandle::callBoxed).
  std::function<void(torch::jit::Stack&)> call;
  /// The same function with CPU copies of the arguments, for the CUDA/CPU comparison; empty
  /// when there is none.
  std::function<void(torch::jit::Stack&)> call_cpu;
  /// A reference implementation with the same arguments and returns (e.g. the function
  /// written with ATen ops, differentiable by autograd): float16/bfloat16 checks take its
  /// float64 run as the precise one and its error in the low dtype as the baseline (options.h:
  /// low-precision rule). Empty: the function's own float64 run is the precise one.
  std::function<void(torch::jit::Stack&)> reference;
  std::string reference_name;  ///< shown in reports, e.g. "customop::rms_norm's reference"
};

/// Checks the gradients of the dispatcher op `op` (any op: customop, another project's
/// TORCH_LIBRARY op, aten) at `args`, one IValue per schema argument.
/// The differentiable inputs are the floating tensors (also in Tensor? and Tensor[]
/// arguments) that require grad; the differentiable outputs the returned tensors that require
/// grad. In messages, output i counts differentiable outputs and input j counts inputs that
/// require grad (torch's numbering), followed by the argument's schema name.
/// \param op       the operator; called through the dispatcher (autograd included)
/// \param args     its arguments in schema order; tensors of any shape, float64 / float32 /
///                 float16 / bfloat16 where they require grad, all on one device (CPU or
///                 CUDA); they are not modified (the check perturbs copies of the same strides)
/// \param options  see GradcheckOptions
/// \returns        the result; `passed` is false when a check failed (raise_exception off)
/// \throws c10::ValueError when no input requires grad, or an input that requires grad has a
///         stride-0 dimension or overlapping memory, or is complex: always, raise_exception
///         or not (torch does the same); also when eps is below 100 u max|x| of an input (u =
///         2^-53: the differences would be rounding; not with LowPrecisionMethod::kRidders).
/// An error the op raises (forward at the point or perturbed, backward, fake kernel) is a
/// failed check (Check::kForwardError, kBackwardError, kFakeKernel) with the op's message.
/// \throws GradcheckError when a check failed and raise_exception is on.
/// Example:
///   auto op = c10::Dispatcher::singleton().findSchemaOrThrow("customop::rms_norm", "");
///   torch::jit::Stack args{torch::randn({4, 8}, torch::kDouble).requires_grad_(),
///                          torch::ones({8}, torch::kDouble), 1e-6};
///   auto r = customop::gradcheck::gradcheck(op, args, {.raise_exception = false});
GradcheckResult gradcheck(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                          const GradcheckOptions& options = {});

/// Checks the gradients of the dispatcher op `op` with `reference` (same argument and return
/// types) as the reference of the float16/bfloat16 rule (options.h), whatever `op` declares.
/// \param op, args, options  as for the c10::OperatorHandle overload
/// \param reference          the reference op, called through the dispatcher
/// \returns, \throws as the c10::OperatorHandle overload.
/// Example:
///   auto r = gradcheck(d.findSchemaOrThrow("myns::fast_gelu", ""),
///                      d.findSchemaOrThrow("aten::gelu", ""), args, {.raise_exception = false});
GradcheckResult gradcheck(const c10::OperatorHandle& op, const c10::OperatorHandle& reference,
                          const torch::jit::Stack& args, const GradcheckOptions& options = {});

/// Checks the gradients of a customop op given by its core; the CUDA/CPU comparison runs
/// when it has a CPU kernel (has_kernel(CPU)).
/// \param op       the op's core (an `Op<Args, Ret>` converts to it)
/// \param args     as for the c10::OperatorHandle overload
/// \param options  see GradcheckOptions
/// \returns, \throws as the c10::OperatorHandle overload.
/// Example:
///   const customop::OpCore& core = customop::ops::rms_norm_op();
///   auto r = customop::gradcheck::gradcheck(core, args);
GradcheckResult gradcheck(const OpCore& op, const torch::jit::Stack& args,
                          const GradcheckOptions& options = {});

/// Checks the gradients of a typed customop op at an args struct.
/// \param op       the op, as `customop::define<Args, Ret>` returned it
/// \param args     its args struct; tensor fields as `args` of the c10::OperatorHandle overload
/// \param options  see GradcheckOptions
/// \returns, \throws as the c10::OperatorHandle overload.
/// Example:
///   auto r = customop::gradcheck::gradcheck(op, ScaleArgs{.x = x.requires_grad_(), .alpha = 5});
template <class Args, class Ret>
GradcheckResult gradcheck(const Op<Args, Ret>& op, const Args& args,
                          const GradcheckOptions& options = {}) {
  return gradcheck(static_cast<const OpCore&>(op), Op<Args, Ret>::to_stack(args), options);
}

/// Checks the gradients of any boxed function (tests, Python-free callables).
/// \param fn       the function, its argument and return names
/// \param args     as for the c10::OperatorHandle overload, in the order `fn.call` pops them
/// \param options  see GradcheckOptions
/// \returns, \throws as the c10::OperatorHandle overload.
/// Example:
///   BoxedFunction fn{.name = "square", .arg_names = {"x"}, .return_names = {"y"},
///                    .call = [](auto& s) { s.back() = s.back().toTensor().square(); }};
///   auto r = gradcheck(fn, {torch::randn({3}, torch::kDouble).requires_grad_()});
GradcheckResult gradcheck(const BoxedFunction& fn, const torch::jit::Stack& args,
                          const GradcheckOptions& options = {});

/// Checks first and second order (torch.autograd.gradgradcheck): gradcheck with
/// check_second_order on: random grad_outputs in [-1, 1] (seeded), then the Jacobian of
/// (inputs, grad_outputs) -> grads computed with create_graph.
/// \param op       any `op` gradcheck takes (dispatcher op, OpCore, Op<Args, Ret>, BoxedFunction)
/// \param args     the matching arguments (a torch::jit::Stack, or the args struct)
/// \param options  see GradcheckOptions; check_second_order is set here
/// \returns, \throws as gradcheck.
/// Example:
///   auto r = customop::gradcheck::gradgradcheck(op, ScaleArgs{.x = x.requires_grad_()});
///   EXPECT_TRUE(r.passed) << r.message();
template <class OpT, class ArgsT>
GradcheckResult gradgradcheck(const OpT& op, const ArgsT& args, GradcheckOptions options = {}) {
  options.check_second_order = true;
  return gradcheck(op, args, options);
}

}  // namespace customop::gradcheck
