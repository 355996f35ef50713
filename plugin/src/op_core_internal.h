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

}  // namespace customop::detail
