#pragma once
/// \file
/// `customop::max_along_backward`: the backward of `customop::max_along` in one write pass:
/// the grad of the values at each slice's argmax, 0 elsewhere.

#include <customop/op.h>

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

#include <cstdint>

namespace customop::ops {

/// Arguments of `customop::max_along_backward(Tensor grad, Tensor indices, int dim, SymInt size)
/// -> Tensor`.
struct MaxAlongBackwardArgs {
  /// g, the grad of max_along's values in keepdim form (size 1 at `dim`; at least 1-d; any
  /// strides), float32 or float64 (CPU and CUDA), float16 or bfloat16 (CPU and CUDA).
  /// Differentiable.
  at::Tensor grad;
  /// max_along's indices in keepdim form: int64, grad's shape and device, each in [0, size).
  /// Not differentiable.
  at::Tensor indices;
  /// The reduced dim, in [-grad.dim(), grad.dim() - 1].
  int64_t dim;
  /// The length of the reduced dim in max_along's input, >= 1: a SymInt, so that under
  /// torch.compile, torch.export and fake tensors it can be the input's symbolic size (the output
  /// shape stays dynamic); concrete in eager calls (an int64_t converts to it).
  c10::SymInt size;
};

/// grad_input = g at position indices along `dim`, 0 elsewhere (g scattered into zeros: ATen's
/// zeros + scatter_ in one pass); a new contiguous tensor of grad's shape with `size` at `dim`,
/// grad's dtype. max_along's backward calls it on plain tensors; tensor subclasses (DTensor,
/// fake tensors) and torch.func wrappers take the ATen ops. Linear in g: its own backward
/// gathers the cotangent at the indices, its JVP is the op on g's tangent; vmap folds the batch
/// into the slices.
/// \returns the op `customop::max_along_backward`, registered when libcustomop_ops loads.
/// \throws c10::Error naming `max_along_backward` and the argument when grad's size at dim is
///         not 1, indices' shape or device is not grad's, or size < 1; c10::TypeError when
///         grad's dtype is not supported or indices are not int64; c10::ValueError when dim is
///         out of range; c10::IndexError (CPU) when an index is outside [0, size), naming the
///         lowest such position, before anything is written (a `.out` buffer keeps its
///         contents). On CUDA an index outside [0, size) fails a device-side assertion (the
///         next synchronising call raises it) and its slice is left zero.
///
/// Example:
///   using customop::ops::MaxAlongBackwardArgs;
///   at::Tensor x = at::randn({4, 5});
///   auto [values, indices] = at::max(x, 1, /*keepdim=*/true);
///   at::Tensor gx = customop::ops::max_along_backward_op()(MaxAlongBackwardArgs{
///       .grad = at::ones_like(values), .indices = indices, .dim = 1, .size = 5});
Op<MaxAlongBackwardArgs>& max_along_backward_op();

}  // namespace customop::ops
