#include "detail/vjp.h"

#include <customop/detail/autograd_node.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/input_metadata.h>
#include <torch/csrc/autograd/variable.h>

#include <cstddef>
#include <string>

namespace customop::gradcheck::detail {

namespace {

using torch::autograd::Edge;
using torch::autograd::InputMetadata;
using torch::autograd::Node;

/// The engine passes the grad_output `g` to the slot `m` describes unchanged: same sizes, dtype
/// and device, a strided CPU tensor, no subclass or nesting to reduce or convert.
bool passes_unchanged(const InputMetadata& m, const at::Tensor& g) {
  return !m.was_default_constructed() && !m.is_tensor_subclass() && !m.is_nested_tensor() &&
         m.layout() == at::kStrided && g.layout() == at::kStrided && m.device().is_cpu() &&
         g.device().is_cpu() && g.dtype() == m.dtype() && m.is_same_shape(g);
}

/// No hook of any kind: the engine would run it around the Node or on a grad it hands on.
bool hookless(Node& n) {
  return n.pre_hooks().empty() && n.tensor_pre_hooks().empty() && n.retains_grad_hooks().empty() &&
         n.post_hooks().empty();
}

/// A leaf's end of the graph: no next edge leads anywhere, no hook.
bool terminal(Node& n) {
  for (const auto& e : n.next_edges()) {
    if (e.is_valid()) return false;
  }
  return hookless(n);
}

/// direct_vjp(); with `undefined_reach`, an undefined grad_outputs[i] is the undefined grad
/// that reaches output i's slot (what UndefinedGradFunction below hands the engine).
std::optional<std::vector<at::Tensor>> direct(const std::vector<at::Tensor>& outputs,
                                              const std::vector<at::Tensor>& grad_outputs,
                                              const std::vector<at::Tensor>& inputs,
                                              bool undefined_reach) {
  if (outputs.empty() || outputs.size() != grad_outputs.size()) return std::nullopt;
  // Anomaly mode checks each grad and records tracebacks; inside another backward, the Node
  // would read that graph task's state (which of its grads are needed, checkpoint validity).
  if (torch::autograd::AnomalyMode::is_enabled()) return std::nullopt;
  if (torch::autograd::get_current_graph_task_id() != -1) return std::nullopt;
  if (!outputs[0].defined()) return std::nullopt;
  const auto& fn = outputs[0].grad_fn();  // std::shared_ptr or c10::intrusive_ptr by version
  if (!fn) return std::nullopt;
  Node& node = *fn;
  // Nodes whose apply() touches no engine state: ATen's generated ones (traceable) and
  // customop's. A C++ or Python autograd::Function's user code may (queue_callback,
  // is_checkpoint_valid, needs_input_grad under the task's pruning).
  // NB: by type, not by Node::is_traceable(), which a Python Node answers by reading an
  // attribute of its Function class that torch.library's generated classes lack (it raises).
  if (!customop::detail::is_op_backward_node(node) &&
      dynamic_cast<const torch::autograd::TraceableFunction*>(&node) == nullptr) {
    return std::nullopt;
  }
  if (!hookless(node)) return std::nullopt;

  torch::autograd::variable_list node_in(node.num_inputs());
  std::vector<bool> used(node_in.size(), false);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& y = outputs[i];
    const at::Tensor& g = grad_outputs[i];
    if (!y.defined() || y.grad_fn().get() != fn.get()) return std::nullopt;
    if (!g.defined() && !undefined_reach) return std::nullopt;  // the engine's error to raise
    const auto slot = static_cast<std::size_t>(y.output_nr());
    // Two outputs in one slot: the engine would sum their grad_outputs.
    if (slot >= node_in.size() || used[slot]) return std::nullopt;
    used[slot] = true;
    if (g.defined()) {
      // The engine checks g against y itself first (torch::autograd::grad's _make_grads: its
      // shape, and a complex y's dtype), then against the slot.
      if (g.dtype() != y.dtype() || g.sizes() != y.sizes()) return std::nullopt;
      if (!passes_unchanged(node.input_metadata(slot), g)) return std::nullopt;
    }
    node_in[slot] = g;
  }

  // Where each requested input's grad is captured: its gradient edge (a leaf's AccumulateGrad).
  std::vector<Edge> want;
  want.reserve(inputs.size());
  for (const auto& x : inputs) {
    if (!x.defined() || !x.requires_grad()) return std::nullopt;  // the engine's error to raise
    want.push_back(torch::autograd::impl::gradient_edge(x));
    if (want.back().function.get() == fn.get()) return std::nullopt;  // an output asked for
  }
  for (std::size_t j = 0; j < want.size(); ++j) {
    for (std::size_t l = j + 1; l < want.size(); ++l) {
      if (want[j] == want[l]) return std::nullopt;  // asked for twice: the engine copies
    }
  }
  const auto& next = node.next_edges();
  std::vector<std::ptrdiff_t> edge_of(inputs.size(), -1);  // next edge feeding input j
  for (std::size_t k = 0; k < next.size(); ++k) {
    const Edge& e = next[k];
    if (!e.is_valid()) continue;
    // Every valid edge goes to a requested input, and nothing past it: the engine would then
    // compute every grad the Node offers (none pruned) and run no other Node.
    std::ptrdiff_t match = -1;
    for (std::size_t j = 0; j < want.size(); ++j) {
      if (want[j] == e) match = static_cast<std::ptrdiff_t>(j);
    }
    if (match < 0 || !terminal(*e.function)) return std::nullopt;
    // One input fed by two edges (op(x, x)): the engine sums them.
    if (edge_of[static_cast<std::size_t>(match)] >= 0) return std::nullopt;
    edge_of[static_cast<std::size_t>(match)] = static_cast<std::ptrdiff_t>(k);
  }

  torch::autograd::variable_list grads;
  {
    const at::AutoGradMode grad_mode(false);  // the engine's grad mode when !create_graph
    grads = node(std::move(node_in));
  }
  // What the engine does with a Node's grads before handing them on, by its own function: a
  // wrong count, shape, device or layout raises; a grad expandable to its input's shape is
  // summed to it; another dtype is converted (to the input's, or its grad_dtype).
  torch::autograd::validate_outputs(next, grads, [&](const std::string& msg) {
    return "Function " + node.name() + " returned an " + msg;
  });
  std::vector<at::Tensor> out(inputs.size());
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    if (edge_of[j] >= 0) out[j] = std::move(grads[static_cast<std::size_t>(edge_of[j])]);
  }
  return out;
}

/// Identity whose backward returns an undefined grad: what reaches the op's backward when an
/// output's grad is undefined (the role of torch._C._functions.UndefinedGrad in Python).
struct UndefinedGradFunction : torch::autograd::Function<UndefinedGradFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x) {
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 const torch::autograd::variable_list&) {
    return {at::Tensor()};
  }
};

/// A ZeroTensor (at::_efficientzerotensor: sign's and sgn's backward for real inputs) has no
/// data to read: the zeros it stands for. (torch's Python autograd.grad materializes them the
/// same way.)
void materialize_zero_tensors(std::vector<at::Tensor>& grads) {
  for (auto& g : grads) {
    if (g.defined() && g._is_zerotensor()) g = at::zeros(g.sizes(), g.options());
  }
}

}  // namespace

std::optional<std::vector<at::Tensor>> direct_vjp(const std::vector<at::Tensor>& outputs,
                                                  const std::vector<at::Tensor>& grad_outputs,
                                                  const std::vector<at::Tensor>& inputs) {
  return direct(outputs, grad_outputs, inputs, /*undefined_reach=*/false);
}

std::vector<at::Tensor> vjp(const std::vector<at::Tensor>& outputs,
                            const std::vector<at::Tensor>& grad_outputs,
                            const std::vector<at::Tensor>& inputs, OpCounts& counts,
                            bool create_graph) {
  ++counts.vjp_calls;
  std::optional<std::vector<at::Tensor>> direct;
  if (!create_graph) direct = direct_vjp(outputs, grad_outputs, inputs);
  std::vector<at::Tensor> grads =
      direct ? std::move(*direct)
             : torch::autograd::grad(outputs, inputs, grad_outputs, /*retain_graph=*/true,
                                     create_graph, /*allow_unused=*/true);
  materialize_zero_tensors(grads);
  return grads;
}

std::vector<at::Tensor> vjp_undefined(const std::vector<at::Tensor>& outputs,
                                      const std::vector<at::Tensor>& grad_outputs,
                                      const std::vector<bool>& undefined,
                                      const std::vector<at::Tensor>& inputs, OpCounts& counts) {
  TORCH_INTERNAL_ASSERT(outputs.size() == grad_outputs.size() &&
                        outputs.size() == undefined.size());
  ++counts.vjp_calls;
  std::vector<at::Tensor> reach(grad_outputs);
  for (std::size_t i = 0; i < reach.size(); ++i) {
    if (undefined[i]) reach[i] = at::Tensor();
  }
  std::optional<std::vector<at::Tensor>> grads =
      direct(outputs, reach, inputs, /*undefined_reach=*/true);
  if (!grads) {
    std::vector<at::Tensor> wrapped(outputs);
    for (std::size_t i = 0; i < wrapped.size(); ++i) {
      if (undefined[i]) wrapped[i] = UndefinedGradFunction::apply(outputs[i]);
    }
    grads = torch::autograd::grad(wrapped, inputs, grad_outputs, /*retain_graph=*/true,
                                  /*create_graph=*/false, /*allow_unused=*/true);
  }
  materialize_zero_tensors(*grads);
  return std::move(*grads);
}

}  // namespace customop::gradcheck::detail
