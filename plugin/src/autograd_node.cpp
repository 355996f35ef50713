// The generated autograd kernel (the reference's gen_autograd_function, rebuilt the way torch
// generates the autograd kernels of its own ops): under grad mode, with an input that requires
// grad, one backward Node per call; the forward redispatches below ADInplaceOrView and runs
// save_for_backward there; the outputs get the Node as their history; the Node's apply runs the
// backward formula and validates its grads.
//
// Why not a torch::autograd::Function: its apply() refuses to run under torch.func (grad, vjp,
// jacrev, hessian), and it switches grad mode off around the forward, which leaks into the
// lower levels of nested transforms. This kernel switches no mode: it excludes the autograd
// dispatch keys for the redispatch only (at::AutoDispatchBelowADInplaceOrView, what torch's
// VariableType kernels do), so it composes with torch.func's transform levels as an ATen op
// does. The behaviour of the legacy CustomOp glue is kept: saved tensors are SavedVariables
// (version-counter check, no reference cycle through saved outputs), undefined grads of
// outputs are materialized as zeros, outputs marked non-differentiable get no history, and the
// grads are checked against the inputs before the engine sees them.
// The typed halves come from Op<Args, Ret> through OpCore::save_boxed / backward_boxed, so
// headers that define ops never include torch's autograd machinery. Compiled autograd calls
// the formula opaquely (compiled_args / apply_with_saved below).

#include <customop/detail/autograd_node.h>
#include <customop/op_core.h>
#include <customop/saved_rounding.h>

#include "op_core_internal.h"

#include <ATen/ExpandUtils.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/autograd/variable_info.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace customop {

namespace {

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::VariableInfo;

// Node is held by std::shared_ptr up to torch 2.14 and by c10::intrusive_ptr from 2.15; getptr()
// exists in both, so its type names whichever this torch uses.
using NodePtr = decltype(std::declval<Node&>().getptr());

template <class T>
NodePtr make_node() {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<Node>>) {
    return std::make_shared<T>();
  } else {
    return c10::make_intrusive<T>();
  }
}

}  // namespace

/// The backward Node of one call of an op with a formula (impl_save_for_backward +
/// impl_backward). One input slot per output tensor of the op (in return order, Tensor[]
/// returns flattened), one next edge per input tensor (every tensor of the args, in schema
/// order; a Tensor? that was None is none).
struct AutogradNode final : Node {
  OpCore* op = nullptr;
  c10::intrusive_ptr<detail::SavedStateBase> state;
  std::vector<SavedVariable> saved;       // the tensor fields of the user's Saved, in order
  std::vector<VariableInfo> output_info;  // to materialize an undefined output grad as zeros

  // NB: built when asked for (profiler, anomaly mode, grad_fn.name()), not on every call.
  std::string name() const override { return c10::str("customop::OpBackward<", op->name(), ">"); }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    // NB: reset, not cleared: unpacking a reset SavedVariable raises torch's "Trying to
    // backward through the graph a second time" error.
    for (auto& s : saved) s.reset_data();
  }

  ~AutogradNode() override {
    if (compiled_id != 0) compiled_nodes().erase(compiled_id);
  }

  // Compiled autograd (torch._dynamo.compiled_autograd): the formula is user code over a typed
  // saved struct, so it runs opaquely in the compiled graph (as torch runs a C++ autograd
  // Function that is not marked traceable), with the saved tensors and a handle of this Node
  // (an int64 tensor holding its id in compiled_nodes()) as the graph's inputs. The cached graph
  // then reads each backward's own Node and saved tensors, never the first one's.
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override {
    if (compiled_id == 0) {
      compiled_id = compiled_nodes().add(const_cast<AutogradNode*>(this));
      compiled_handle = at::scalar_tensor(compiled_id, at::kLong);
    }
    args.collect(name());
    args.collect(compiled_handle);
    for (std::size_t i = 0; i < saved.size(); ++i) args.collect(saved[i], saved_is_output[i]);
  }

  torch::autograd::variable_list apply_with_saved(
      const torch::autograd::variable_list& grads,
      torch::dynamo::autograd::SwapSavedVariables& swap) override {
    swap.before(compiled_handle);
    for (auto& s : saved) swap.before(s);
    std::vector<c10::IValue> packed;
    std::vector<at::TypePtr> schema;
    packed.reserve(saved.size() + 1);
    packed.emplace_back(compiled_handle);
    schema.emplace_back(at::TensorType::get());
    const NodePtr self = getptr();
    for (const auto& s : saved) {
      const at::Tensor t = s.unpack(self);
      packed.emplace_back(t.defined() ? c10::IValue(t) : c10::IValue());
      schema.push_back(t.defined() ? at::TypePtr(at::TensorType::get())
                                   : at::TypePtr(at::NoneType::get()));
    }
    const c10::IValue output_metadata = torch::dynamo::autograd::
        IValuePacker<std::vector<std::optional<torch::autograd::InputMetadata>>>::pack(
            torch::dynamo::autograd::get_input_metadata(next_edges()));
    const auto& py = torch::dynamo::autograd::getPyCompilerInterface();
    const std::string fn = py->bind_function(swap.get_py_compiler(), name(), &compiled_apply,
                                             schema, /*is_custom_function=*/true,
                                             /*is_traceable=*/false);
    torch::autograd::variable_list results = py->call_function(
        swap.get_py_compiler(), "apply_functional", fn, grads, packed, output_metadata);
    swap.after(compiled_handle);
    for (auto& s : saved) swap.after(s);
    return results;
  }

  /// The formula on `saved_tensors` (in the order of `saved`) and the output grads: the body of
  /// apply, shared with the compiled graph's call (compiled_apply).
  std::vector<at::Tensor> run_formula(const std::vector<at::Tensor>& saved_tensors,
                                      std::vector<at::Tensor> grads) const {
    at::OptionalDeviceGuard device_guard;
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) grads[i] = output_info.at(i).zeros(device_guard);
    }
    std::vector<at::Tensor> flat;
    flat.reserve(num_outputs());
    try {
      op->backward_boxed(*state, saved_tensors, grads, flat);
    } catch (...) {
      detail::rethrow_naming_op(op->name(), "backward",
                                op->backward_loc_ ? &*op->backward_loc_ : nullptr);
    }
    check_grads_match_inputs(flat);
    TORCH_INTERNAL_ASSERT(flat.size() == num_outputs(), op->name(), ": the backward gave ",
                          flat.size(), " grads for ", num_outputs(), " inputs");
    return flat;
  }

  /// What the compiled graph calls: args are the Node's handle, then its saved tensors (None
  /// for an undefined one).
  static torch::autograd::variable_list compiled_apply(const torch::autograd::variable_list& grads,
                                                       const std::vector<c10::IValue>& args) {
    const int64_t id = args.at(0).toTensor().item<int64_t>();
    AutogradNode* node = compiled_nodes().find(id);
    TORCH_CHECK(node != nullptr,
                "customop: a compiled backward graph called the formula of a backward Node that "
                "no longer exists (id ",
                id, ")");
    std::vector<at::Tensor> saved_tensors;
    saved_tensors.reserve(args.size() - 1);
    for (std::size_t i = 1; i < args.size(); ++i) {
      saved_tensors.push_back(args[i].isNone() ? at::Tensor() : args[i].toTensor());
    }
    std::lock_guard<std::mutex> lock(node->mutex_);
    std::vector<at::Tensor> flat = node->run_formula(saved_tensors, grads);
    // The compiled graph was traced with a tensor for every input that has an edge (it adds
    // them up where paths meet); where the formula gave none (no grad: undefined, which the
    // eager engine skips), it gets zeros of the input's shape.
    for (std::size_t i = 0; i < flat.size(); ++i) {
      if (flat[i].defined() || !node->next_edge(i).is_valid()) continue;
      const detail::ArgsInfo::InputMeta& meta = node->state->info.inputs.at(i);
      flat[i] = at::zeros_symint(c10::SymIntArrayRef(meta.sizes),
                                 at::TensorOptions().dtype(meta.dtype).device(meta.device));
    }
    return flat;
  }

  /// The Nodes a compiled graph may call, by id (ids start at 1; 0 is "not registered").
  class CompiledNodes {
   public:
    int64_t add(AutogradNode* node) {
      std::lock_guard<std::mutex> lock(mutex_);
      const int64_t id = ++last_;
      nodes_.emplace(id, node);
      return id;
    }
    void erase(int64_t id) {
      std::lock_guard<std::mutex> lock(mutex_);
      nodes_.erase(id);
    }
    AutogradNode* find(int64_t id) {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = nodes_.find(id);
      return it == nodes_.end() ? nullptr : it->second;
    }

   private:
    std::mutex mutex_;
    int64_t last_ = 0;
    std::unordered_map<int64_t, AutogradNode*> nodes_;
  };
  static CompiledNodes& compiled_nodes() {
    static auto* nodes = new CompiledNodes();  // NB: leaked: Nodes may outlive static destruction
    return *nodes;
  }

  std::vector<bool> saved_is_output;   // per entry of `saved`: a saved output of this op
  mutable int64_t compiled_id = 0;     // in compiled_nodes(), once compiled autograd saw it
  mutable at::Tensor compiled_handle;  // int64 scalar holding compiled_id

  /// The checks torch's engine makes on the grads a Node returns (validate_outputs), made
  /// first so that a refusal names the op and the argument, where the engine's names neither:
  ///   - shape: equal to the input's, or one that sums to it (the engine reduces it);
  ///   - dtype: a complex grad for a real input or the reverse (other dtypes are converted);
  ///   - device: the input's (a 0-dim input also takes a 0-dim grad from another real device,
  ///     which the engine moves; a meta grad for a real input never).
  void check_grads_match_inputs(const std::vector<at::Tensor>& grads) const {
    const detail::ArgsInfo& info = state->info;
    std::size_t flat = 0;
    for (std::size_t i = 0; i < info.counts.size(); ++i) {
      for (int32_t k = 0; k < info.counts[i]; ++k, ++flat) {
        const at::Tensor& g = grads.at(flat);
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
        const std::string& arg = op->args()[i].name;
        const std::string what = op->args()[i].kind == ArgKind::kTensorList
                                     ? c10::str("'", arg, "'[", k, "]")
                                     : c10::str("'", arg, "'");
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
        op->backward_error(msg.str());
      }
    }
  }

 protected:
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grad_outputs) override {
    // NB: the formula is user code that may keep state; calls on one Node are serialized, as
    // torch does for its custom Functions.
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<at::Tensor> saved_tensors;
    saved_tensors.reserve(saved.size());
    const NodePtr self = getptr();
    for (const auto& s : saved) saved_tensors.push_back(s.unpack(self));
    return run_formula(saved_tensors, std::move(grad_outputs));
  }
};

namespace {

// A saved tensor that shares memory with an input or output without being it (a.x.t(),
// out[0], a.x.view(-1)) is no tracked view: save_for_backward runs below ADInplaceOrView, so
// it has a version counter of its own, and an in-place write to the input or output before
// backward would go unseen (backward would read the new values). It takes the counter of the
// tensor it aliases, so SavedVariable's check raises then, as it does for a view saved by a
// torch.autograd.Function. Inference tensors have no counter to share.
void share_version_with_aliased(const at::Tensor& saved, const std::vector<at::Tensor>& inputs,
                                const std::vector<at::Tensor>& outputs) {
  if (!saved.defined() || saved.is_inference() || !saved.has_storage()) return;
  for (const auto* group : {&inputs, &outputs}) {
    for (const at::Tensor& t : *group) {
      if (!t.defined() || t.is_inference() || !t.has_storage()) continue;
      if (t.is_same(saved)) return;  // the tensor itself: its own counter is the right one
      if (t.is_alias_of(saved)) {
        torch::autograd::impl::set_version_counter(saved,
                                                   torch::autograd::impl::version_counter(t));
        return;
      }
    }
  }
}

}  // namespace

namespace detail {
bool is_op_backward_node(const torch::autograd::Node& node) {
  return dynamic_cast<const AutogradNode*>(&node) != nullptr;
}
}  // namespace detail

void OpCore::run_autograd(c10::DispatchKeySet ks, torch::jit::Stack* stack,
                          const torch::jit::Stack* fw_args) {
  // save_for_backward, with an exception it throws naming the op (op_user_errors.cpp).
  const auto save_naming_op = [this](torch::jit::Stack& args, const torch::jit::Stack& outputs,
                                     std::vector<at::Tensor>& to_save) {
    try {
      return save_boxed(args, outputs, to_save);
    } catch (...) {
      detail::rethrow_naming_op(name_, "save_for_backward", save_loc_ ? &*save_loc_ : nullptr);
    }
  };
  const std::size_t n = args_.size();
  // The node's inputs: every tensor of the args, in schema order.
  // NB: a Tensor? that is None is no input (an undefined tensor there is refused); the grads
  // skip it too (ArgsInfo::kNone).
  std::vector<at::Tensor> inputs;
  inputs.reserve(n);
  const auto first_arg = stack->end() - static_cast<std::ptrdiff_t>(n);
  for (std::size_t i = 0; i < n; ++i) {
    const c10::IValue& v = first_arg[static_cast<std::ptrdiff_t>(i)];
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
  const std::size_t num_returns = returns_.size();
  if (!torch::autograd::compute_requires_grad(at::TensorList(inputs))) {
    // No gradient can be asked for: no Node. save_for_backward and the output_differentiability
    // check still run, as the reference's forward runs them on every call; the saved state is
    // dropped at once.
    torch::jit::Stack args(first_arg, stack->end());
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      handle_->redispatchBoxed(ks & c10::after_ADInplaceOrView_keyset, stack);
      const torch::jit::Stack outputs(stack->end() - static_cast<std::ptrdiff_t>(num_returns),
                                      stack->end());
      std::vector<at::Tensor> to_save;
      save_naming_op(args, outputs, to_save);
      std::vector<at::Tensor> non_differentiable;
      non_differentiable_outputs(outputs, non_differentiable);
    }
    // NB: outside the guard: the JVP's ops (and _fw_primal) need the autograd keys.
    if (fw_args != nullptr) apply_forward_grads(*fw_args, *stack);
    return;
  }

  NodePtr node_ptr = make_node<AutogradNode>();
  auto& node = static_cast<AutogradNode&>(*node_ptr);
  node.op = this;
  node.set_next_edges(torch::autograd::collect_next_edges(inputs));

  detail::ArgsInfo info;
  collect_args_info(*stack, info);
  info.inputs.reserve(inputs.size());
  for (const auto& t : inputs) {
    info.inputs.push_back({c10::SymDimVector(t.sym_sizes()), t.scalar_type(), t.device()});
  }
  torch::jit::Stack args(first_arg, stack->end());

  std::vector<at::Tensor> to_save;
  {
    // NB: the autograd keys are excluded for the kernel and save_for_backward (what
    // autograd::Function did by switching grad mode off, without touching the mode).
    at::AutoDispatchBelowADInplaceOrView guard;
    handle_->redispatchBoxed(ks & c10::after_ADInplaceOrView_keyset, stack);
    torch::jit::Stack outputs(stack->end() - static_cast<std::ptrdiff_t>(num_returns),
                              stack->end());
    node.state = save_naming_op(args, outputs, to_save);
  }
  node.state->info = std::move(info);
  node.state->op = this;

  std::vector<at::Tensor> non_differentiable;
  torch::jit::Stack out_view(stack->end() - static_cast<std::ptrdiff_t>(num_returns), stack->end());
  non_differentiable_outputs(out_view, non_differentiable);

  // The outputs, in return order, with the node as their history.
  std::vector<at::Tensor> outputs;
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(num_returns); it != stack->end();
       ++it) {
    if (it->isTensor()) {
      outputs.push_back(it->toTensor());
    } else if (it->isTensorList()) {
      auto list = it->toTensorVector();
      node.state->return_list_sizes.push_back(static_cast<int32_t>(list.size()));
      outputs.insert(outputs.end(), list.begin(), list.end());
    }
  }
  node.output_info.reserve(outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& out = outputs[i];
    const bool is_input = std::any_of(inputs.begin(), inputs.end(),
                                      [&](const at::Tensor& t) { return t.is_same(out); });
    TORCH_CHECK(!out.defined() || !is_input, name_,
                ": the kernel returned one of its input tensors as output ", i,
                "; a functional op's returns must be new tensors (return a copy, e.g. "
                "x.clone())");
    node.output_info.emplace_back(out.defined() ? VariableInfo(out) : VariableInfo());
    bool differentiable = out.defined() && torch::autograd::isDifferentiableType(out.scalar_type());
    for (const auto& nd : non_differentiable) {
      differentiable = differentiable && !nd.is_same(out);
    }
    if (differentiable) {
      torch::autograd::set_history(out, node_ptr);
    } else {
      node.add_input_metadata(Node::undefined_input());
    }
  }

  // NB: the tangents before the saved outputs are packed: a SavedVariable of an output keeps
  // the tangent it has then (forward-over-reverse reads it in backward), as torch's kernels do.
  if (fw_args != nullptr) apply_forward_grads(*fw_args, *stack);
  // NB: after set_history, so a saved output is recognised as one (saved without its
  // history, which would be a reference cycle through the node).
  node.saved.reserve(to_save.size());
  node.saved_is_output.reserve(to_save.size());
  for (const auto& t : to_save) {
    // SavedRounding (a low-precision gradcheck's model run): a rounded copy, no output.
    const at::Tensor kept = round_if_saved_rounding(t);
    share_version_with_aliased(kept, inputs, outputs);
    const bool is_output = kept.defined() && kept.grad_fn().get() == node_ptr.get();
    node.saved.emplace_back(kept, is_output);
    node.saved_is_output.push_back(is_output);
  }
}

}  // namespace customop
