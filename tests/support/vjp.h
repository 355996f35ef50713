#pragma once
/// \file
/// Vector-Jacobian products through autograd, to compare an op's backward formula with
/// autograd on an ATen composite reference.

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <functional>
#include <vector>

namespace customop::testing {

/// Grads of sum(fn(leaves) * grad_output) w.r.t. each floating-point input, where `leaves`
/// are detached copies of `inputs` that require grad (non-floating inputs are passed as they
/// are). One entry per input: undefined for non-floating inputs and for unused ones.
/// Example:
///   auto g = at::randn({4, 8}, at::kDouble);
///   auto ours = vjp([](const auto& in) { return my_op(in[0]); }, {x}, g);
inline std::vector<at::Tensor> vjp(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& fn,
    const std::vector<at::Tensor>& inputs, const at::Tensor& grad_output) {
  std::vector<at::Tensor> leaves;
  std::vector<at::Tensor> wrt;
  std::vector<int64_t> slot;
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor leaf = inputs[i];
    if (leaf.defined() && at::isFloatingType(leaf.scalar_type())) {
      // NB: keep the input's strides (a non-contiguous input must reach the op as it is).
      leaf = leaf.detach().requires_grad_(true);
      wrt.push_back(leaf);
      slot.push_back(static_cast<int64_t>(i));
    }
    leaves.push_back(leaf);
  }
  const at::Tensor out = fn(leaves);
  const auto grads = torch::autograd::grad({out}, wrt, {grad_output}, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  std::vector<at::Tensor> result(inputs.size());
  for (size_t k = 0; k < wrt.size(); ++k) result[static_cast<size_t>(slot[k])] = grads[k];
  return result;
}

}  // namespace customop::testing
