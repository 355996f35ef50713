#pragma once
// Mapping the tensors of a boxed argument stack. Internal to customop_gradcheck.

#include <ATen/core/stack.h>

#include <optional>

namespace customop::gradcheck::detail {

/// A copy of `args` with every defined tensor (also in Tensor[] and Tensor?[]) replaced by
/// f(t); undefined tensors, None and other values are kept as they are.
template <class F>
torch::jit::Stack map_stack_tensors(const torch::jit::Stack& args, F f) {
  auto g = [&](const at::Tensor& t) { return t.defined() ? f(t) : t; };
  torch::jit::Stack out;
  out.reserve(args.size());
  for (const auto& v : args) {
    if (v.isTensor()) {
      out.emplace_back(g(v.toTensor()));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) list.push_back(g(t));
      out.emplace_back(std::move(list));
    } else if (v.isList() && !v.toListRef().empty() && v.toListRef()[0].isTensor()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const auto& e : v.toListRef()) {
        list.push_back(e.isNone() ? std::nullopt : std::optional<at::Tensor>(g(e.toTensor())));
      }
      out.emplace_back(std::move(list));
    } else {
      out.push_back(v);
    }
  }
  return out;
}

/// A copy of `args` whose tensors are detached clones: the op checks call an op on these so
/// that the caller's sample is never written and no graph is recorded.
inline torch::jit::Stack clone_stack_detached(const torch::jit::Stack& args) {
  return map_stack_tensors(args, [](const at::Tensor& t) { return t.detach().clone(); });
}

}  // namespace customop::gradcheck::detail
