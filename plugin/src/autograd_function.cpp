// The generated autograd Function (the reference's gen_autograd_function): one
// torch::autograd::Function for every op, compiled once here. Its forward redispatches below
// autograd and runs save_for_backward; its backward runs the formula and validates the grads.
// The typed halves come from Op<Args, Ret> through OpCore::save_boxed / backward_boxed, so
// headers that define ops never include torch's autograd Function machinery.

#include <customop/op_core.h>

#include <ATen/ExpandUtils.h>
#include <torch/csrc/autograd/custom_function.h>

#include <sstream>
#include <string>
#include <vector>

namespace customop {

namespace {

constexpr const char* kSavedStateKey = "customop";

/// What the Function's forward needs from the autograd kernel.
struct ForwardCall {
  OpCore* op;
  c10::DispatchKeySet ks;
  torch::jit::Stack* stack;  // holds the args on entry, the outputs on exit
  torch::jit::Stack args;    // a copy of the args (save_for_backward reads them)
  detail::ArgsInfo info;
};

}  // namespace

struct GeneratedFunction : torch::autograd::Function<GeneratedFunction> {
  /// The checks torch's engine makes on the grads a Function returns (validate_outputs),
  /// made first so that a refusal names the op and the argument, where the engine's names
  /// neither ("Function CppNode<...> returned an invalid gradient at index 0"):
  ///   - shape: equal to the input's, or one that sums to it (the engine reduces it);
  ///   - dtype: a complex grad for a real input or the reverse (other dtypes are converted);
  ///   - device: the input's (a 0-dim input also takes a 0-dim grad from another real device,
  ///     which the engine moves; a meta grad for a real input never).
  /// `grads[0]` belongs to the ForwardCall* argument.
  static void check_grads_match_inputs(const OpCore& op, const detail::ArgsInfo& info,
                                       const std::vector<at::Tensor>& grads) {
    std::size_t flat = 0;
    for (std::size_t i = 0; i < info.counts.size(); ++i) {
      for (int32_t k = 0; k < info.counts[i]; ++k, ++flat) {
        const at::Tensor& g = grads.at(flat + 1);
        if (!g.defined()) continue;
        const detail::ArgsInfo::InputMeta& want = info.inputs.at(flat);
        const c10::SymIntArrayRef want_sizes(want.sizes);
        const bool shape_ok =
            g.sym_sizes() == want_sizes || at::is_expandable_to(want_sizes, g.sym_sizes());
        const bool dtype_ok = at::isFloatingType(g.scalar_type()) ||
                              at::isComplexType(g.scalar_type()) == at::isComplexType(want.dtype);
        const bool zero_dim = want.sizes.empty();
        const bool device_ok =
            g.device() == want.device ||
            (zero_dim && !(g.is_meta() && want.device.type() != c10::DeviceType::Meta));
        if (shape_ok && dtype_ok && device_ok) continue;
        const std::string& arg = op.args()[i].name;
        const std::string what = op.args()[i].kind == ArgKind::kTensorList
                                     ? "'" + arg + "'[" + std::to_string(k) + "]"
                                     : "'" + arg + "'";
        std::ostringstream msg;
        msg << "the grad for " << what;
        if (!shape_ok) {
          msg << " has shape " << g.sym_sizes() << " but " << what << " has shape " << want_sizes
              << " (a grad must have its input's shape, or one that sums to it)";
        } else if (!dtype_ok) {
          msg << " has dtype " << g.scalar_type() << " but " << what << " has dtype " << want.dtype
              << " (a real input takes a real grad, a complex input a complex one)";
        } else {
          msg << " is on " << g.device() << " but " << what << " is on " << want.device
              << " (a grad must be on its input's device)";
        }
        op.backward_error(msg.str());
      }
    }
  }

  static std::vector<at::Tensor> forward(torch::autograd::AutogradContext* ctx, ForwardCall* call,
                                         at::TensorList /*inputs*/) {
    ctx->set_materialize_grads(true);
    OpCore& op = *call->op;
    torch::jit::Stack& stack = *call->stack;
    op.handle().redispatchBoxed(call->ks & c10::after_autograd_keyset, &stack);
    std::vector<at::Tensor> non_differentiable;
    op.non_differentiable_outputs(stack, non_differentiable);

    const std::size_t num_returns = op.returns().size();
    torch::jit::Stack outputs(stack.end() - static_cast<std::ptrdiff_t>(num_returns), stack.end());
    std::vector<at::Tensor> to_save;
    auto state = op.save_boxed(call->args, outputs, to_save);
    state->info = std::move(call->info);
    state->op = &op;
    std::vector<at::Tensor> tensors;
    for (const auto& v : outputs) {
      if (v.isTensor()) {
        tensors.push_back(v.toTensor());
      } else if (v.isTensorList()) {
        auto list = v.toTensorVector();
        state->return_list_sizes.push_back(static_cast<int32_t>(list.size()));
        tensors.insert(tensors.end(), list.begin(), list.end());
      }
    }
    ctx->save_for_backward(to_save);
    ctx->saved_data[kSavedStateKey] =
        c10::IValue::make_capsule(c10::intrusive_ptr<torch::CustomClassHolder>(std::move(state)));
    if (!non_differentiable.empty()) ctx->mark_non_differentiable(non_differentiable);
    return tensors;
  }

  static std::vector<at::Tensor> backward(torch::autograd::AutogradContext* ctx,
                                          std::vector<at::Tensor> grad_outputs) {
    auto holder = ctx->saved_data.at(kSavedStateKey).toCapsule();
    auto& state = static_cast<detail::SavedStateBase&>(*holder);
    const auto saved_tensors = ctx->get_saved_variables();
    std::vector<at::Tensor> grads;
    grads.emplace_back();  // for the ForwardCall* argument of forward
    state.op->backward_boxed(state, saved_tensors, grad_outputs, grads);
    check_grads_match_inputs(*state.op, state.info, grads);
    return grads;
  }
};

void OpCore::run_autograd(c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const std::size_t n = args_.size();
  ForwardCall call{this,
                   ks,
                   stack,
                   torch::jit::Stack(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end()),
                   {}};
  collect_args_info(*stack, call.info);
  // The Function's inputs: every tensor of the args, in schema order.
  // NB: a Tensor? that is None is no input (an undefined tensor there is refused); the grads
  // skip it too (ArgsInfo::kNone).
  std::vector<at::Tensor> inputs;
  for (std::size_t i = 0; i < n; ++i) {
    const c10::IValue& v = call.args[i];
    switch (args_[i].kind) {
      case ArgKind::kTensor: inputs.push_back(v.toTensor()); break;
      case ArgKind::kOptionalTensor:
        if (!v.isNone() && v.toTensor().defined()) inputs.push_back(v.toTensor());
        break;
      case ArgKind::kTensorList: {
        auto list = v.toTensorVector();
        inputs.insert(inputs.end(), list.begin(), list.end());
        break;
      }
      default: break;
    }
  }
  call.info.inputs.reserve(inputs.size());
  for (const auto& t : inputs) {
    call.info.inputs.push_back({c10::SymDimVector(t.sym_sizes()), t.scalar_type(), t.device()});
  }
  const std::vector<at::Tensor> outputs = GeneratedFunction::apply(&call, at::TensorList(inputs));
  // Hand back the autograd-wrapped tensors in place of the raw ones.
  const std::size_t num_returns = returns_.size();
  std::size_t k = 0;
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(num_returns); it != stack->end();
       ++it) {
    if (it->isTensor()) {
      *it = outputs[k++];
    } else if (it->isTensorList()) {
      const std::size_t len = it->toTensorList().size();
      std::vector<at::Tensor> wrapped(outputs.begin() + static_cast<std::ptrdiff_t>(k),
                                      outputs.begin() + static_cast<std::ptrdiff_t>(k + len));
      k += len;
      *it = c10::IValue(std::move(wrapped));
    }
  }
}

}  // namespace customop
