#pragma once
// Helpers shared by the core's source files (op_*.cpp); not installed.

#include <customop/op_core.h>

#include <ATen/core/ivalue.h>
#include <torch/library.h>

#include <initializer_list>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace customop::detail {

/// Python's name for the type of `v` in messages: "Tensor", "NoneType", "List[Tensor]", ...
std::string ivalue_type_name(const c10::IValue& v);

/// Registers, for `op` (a name in `lib`'s namespace, "name.overload" or "name"), the boxed
/// kernel `make(index)` (a std::unique_ptr to a c10::OperatorKernel) at each (key, index) of
/// `keys`: the kernels of the overloads customop generates (out=, in-place), one functor type
/// per overload that switches on the index.
template <class MakeKernel>
void impl_at_keys(torch::Library& lib, const std::string& op,
                  std::initializer_list<std::pair<c10::DispatchKey, int>> keys, MakeKernel make) {
  for (const auto& key_index : keys) {
    lib.impl(op.c_str(), torch::dispatch(key_index.first, torch::CppFunction::makeFromBoxedFunctor(
                                                              make(key_index.second))));
  }
}

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

/// The in-place variant `variant` writes the result of `functional` into its argument `x`
/// (`self`): it must have x's sizes and dtype. Throws c10::Error naming both before anything
/// is written (op_inplace_variant.cpp).
void check_result_fits(const std::string& variant, const std::string& functional,
                       const std::string& x, const at::Tensor& result, const at::Tensor& self);

/// Registers the in-place variant's kernel at FuncTorchBatched (op_batching.cpp) in `lib`, for
/// `variant` (its name in lib's namespace): the functional op on the batched arguments (its
/// rule), then copy_ into the first argument. Done when the op has both a batching rule and an
/// in-place variant, by whichever is declared second.
void impl_inplace_batched(torch::Library& lib, const std::string& variant, const OpCore* op);

/// True when `t` (of `spec`'s sizes) has the strides `spec` states (contiguous when it states
/// none); a dim of size 1 may have any stride. Used by the out= buffers and the in-place
/// variant's direct write.
bool has_spec_strides(const at::Tensor& t, const TensorSpec& spec);

/// What messages call a kernel of `device`: "CPU kernel", "CUDA kernel", "fake (Meta) kernel".
const char* kernel_role(c10::DeviceType device);

/// Called in a `catch (...)` around an op's own code (`role`: "CPU kernel", "backward", ...,
/// registered at `loc`, or nullptr when not recorded): rethrows the exception being handled so
/// that it names `op`, keeping its Python type. A c10::Error gains a context line unless its
/// message already names the op; one carrying a Python exception (python_error, pybind11::,
/// torch::) passes unchanged; any other std::exception becomes a c10::Error (std::out_of_range:
/// c10::IndexError, as torch maps it) with its type and what(); anything else (`throw 42`)
/// becomes a c10::Error saying what was thrown (op_user_errors.cpp).
[[noreturn]] void rethrow_naming_op(std::string_view op, std::string_view role,
                                    const std::source_location* loc);

}  // namespace customop::detail
