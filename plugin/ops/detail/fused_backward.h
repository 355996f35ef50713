#pragma once
// Where the built-in ops' fused backward kernels run: on plain tensors. A tensor subclass
// (DTensor, fake and functional tensors; the Python dispatch key) takes the backward formula
// in ATen ops instead, which it handles (shards, traces) as it handles the forward's.

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>

#include <initializer_list>

namespace customop::ops::detail {

/// True when any of `tensors` is a tensor subclass (has the Python dispatch key).
inline bool any_subclass(std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors) {
    if (t->key_set().has(c10::DispatchKey::Python)) return true;
  }
  return false;
}

/// True when any of `tensors` is a tensor subclass or a torch.func wrapper (vmap's batched
/// tensors, grad's wrappers): for ATen ops with no batching rule of their own (scatter_).
inline bool any_subclass_or_functorch(std::initializer_list<const at::Tensor*> tensors) {
  const c10::DispatchKeySet wrapped({c10::DispatchKey::Python, c10::DispatchKey::FuncTorchBatched,
                                     c10::DispatchKey::FuncTorchGradWrapper});
  for (const at::Tensor* t : tensors) {
    if (t->key_set().has_any(wrapped)) return true;
  }
  return false;
}

}  // namespace customop::ops::detail
