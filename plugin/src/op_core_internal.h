#pragma once
// Helpers shared by the core's source files (op_*.cpp); not installed.

#include <customop/op_core.h>

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace customop::detail {

/// Python's name for the type of `v` in messages: "Tensor", "NoneType", "List[Tensor]", ...
std::string ivalue_type_name(const c10::IValue& v);

/// A None passed for a (non-optional) Tensor reaches the kernels as an undefined tensor, whose
/// first use would throw "tensor does not have a device" without naming the op or argument.
/// Checked by the first customop kernel a call reaches: Autograd, the device kernel, or the
/// no-backend kernel. Throws c10::TypeError naming the op and the argument.
void check_tensor_args_defined(const std::string& name, const std::vector<ArgSpec>& args,
                               const torch::jit::Stack& stack);

/// The stack whose tensor arguments the Autograd kernel checked (check_tensor_args_defined) on
/// this thread, while it redispatches it: the device kernel that call reaches skips the same
/// check. Any other call (no Autograd key, a nested op, another stack) is checked as usual.
class ArgsCheckedScope {
 public:
  explicit ArgsCheckedScope(const torch::jit::Stack* stack) : previous_(current_) {
    current_ = stack;
  }
  ~ArgsCheckedScope() { current_ = previous_; }
  ArgsCheckedScope(const ArgsCheckedScope&) = delete;
  ArgsCheckedScope& operator=(const ArgsCheckedScope&) = delete;

  /// True when `stack` is the one the innermost scope on this thread checked.
  static bool checked(const torch::jit::Stack* stack) { return current_ == stack; }

 private:
  static thread_local const torch::jit::Stack* current_;
  const torch::jit::Stack* previous_;
};

}  // namespace customop::detail
