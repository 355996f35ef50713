#pragma once
// What code outside the library may know of the backward Node of a customop op call (the
// generated autograd kernel, plugin/src/autograd_node.cpp), without including it.

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace customop::detail {

/// True when `node` is the backward Node of a customop op call: its apply() runs the op's
/// backward formula and checks the grads by argument name, and touches no autograd engine
/// state (no final callbacks, no checkpoint validity). The gradcheck harness calls such a
/// Node directly (gradcheck/src/detail/vjp.cpp). Throws nothing.
bool is_op_backward_node(const torch::autograd::Node& node);

}  // namespace customop::detail
