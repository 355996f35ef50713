#pragma once
// The function a check works on: f(differentiable inputs) -> every tensor output, built from
// a boxed call and its argument stack. Internal to customop_gradcheck.

#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace customop::gradcheck::detail {

/// Where a differentiable input sits in the argument stack.
struct Slot {
  std::size_t arg = 0;   // index in the stack
  int64_t element = -1;  // index inside a Tensor[] argument, or -1
  std::string name;      // "x", "xs[1]"
};

/// Thrown by a Function's evaluators when the function itself raises: `what()` is the
/// original message on one line, prefixed by where it was raised.
struct FunctionRaised : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using TensorFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

/// f(inputs) -> flat outputs. `eval` runs in the inputs' own dtype; `eval_reference` (may be
/// empty) takes float64 inputs and runs every floating argument in float64.
struct Function {
  std::vector<std::string> input_names;
  TensorFn eval;
  TensorFn eval_reference;
  /// Names of the flat outputs of the latest evaluation ("y", "outs[1]", "output 0").
  std::function<std::vector<std::string>()> output_names;
};

/// How reports name flat output `o` whose name (Function::output_names) is `name`: a name
/// the harness made up ("output 2", "output 0[1]" for an element of a Tensor[] return) as it
/// is, a schema's return name as "output 1 ('mean')". One spelling for every headline, note and
/// element of a report.
std::string output_label(std::size_t o, const std::string& name);

/// The floating tensors of `args` that require grad, in stack order (list elements in order).
std::vector<Slot> find_slots(const torch::jit::Stack& args,
                             const std::vector<std::string>& arg_names);

/// Builds f over the slots of `args`; every call of the op increments counts->forward_calls.
/// `counts` must outlive the returned Function.
Function make_op_function(const BoxedFunction& fn, const torch::jit::Stack& args,
                          const std::vector<Slot>& slots, OpCounts* counts);

/// `args` with every slot replaced by `inputs` (list arguments rebuilt, never shared).
/// `to_double` also casts every other floating tensor to float64; `device` moves every tensor.
torch::jit::Stack substitute(const torch::jit::Stack& args, const std::vector<Slot>& slots,
                             const std::vector<at::Tensor>& inputs, bool to_double,
                             std::optional<c10::Device> device = std::nullopt);

/// The tensors among `returns`, flattened (Tensor[] returns element by element; a None return
/// or a non-tensor return contributes nothing).
std::vector<at::Tensor> flatten_returns(const torch::jit::Stack& returns);

/// A detached copy of `t` with the same sizes, strides and storage offset (so the kernel sees
/// the same memory layout), on the same device, of `dtype` (default: t's).
at::Tensor clone_like(const at::Tensor& t, std::optional<c10::ScalarType> dtype = std::nullopt);

/// A seeded dense grad_output for `y`: uniform in [-1, 1], drawn in float64 from `gen`, then
/// of y's shape, dtype and device, not requiring grad. (A one-hot grad_output would leave most
/// of a reduction's paths unused.)
at::Tensor random_grad_output(const at::Tensor& y, at::Generator& gen);

/// max |t| over the finite elements of `t` (any dtype, device), 0 when it has none.
double largest_finite_abs(const at::Tensor& t);

/// "[2, 3]".
std::string format_sizes(c10::IntArrayRef sizes);
/// Index `flat` (row-major over `sizes`) as "[1, 2]" and as a vector.
std::vector<int64_t> unravel(int64_t flat, c10::IntArrayRef sizes);
std::string format_index(const std::vector<int64_t>& index);

/// "float64", "float32", "float16", "bfloat16"; c10's name for other dtypes.
std::string dtype_name(c10::ScalarType t);

/// The message of an exception without libtorch's backtrace, on one line. Call it where the
/// harness catches an error of the checked function: it runs the caught-error hook
/// (set_caught_error_hook) first.
std::string one_line_error(const std::exception& e);

/// Runs the caught-error hook, if one is set (set_caught_error_hook), and returns what it adds
/// to the message ("" without a hook).
std::string note_caught_error();

}  // namespace customop::gradcheck::detail
