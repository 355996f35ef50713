#pragma once
/// \file
/// `customop::masked_softmax_backward`: the backward of `customop::masked_softmax` in one pass
/// per slice: grad_input = y * (g - sum(g * y, dim)).

#include <customop/op.h>

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace customop::ops {

/// Arguments of `customop::masked_softmax_backward(Tensor grad, Tensor output, int dim) ->
/// Tensor`.
struct MaskedSoftmaxBackwardArgs {
  /// g, the grad of masked_softmax's output: output's shape, dtype and device (any strides).
  /// Differentiable.
  at::Tensor grad;
  /// y, masked_softmax's output (0 where masked): any shape (0-d included; any strides),
  /// float32 or float64 (CPU and CUDA), float16 or bfloat16 (CPU and CUDA; computed in
  /// float32, rounded once). Differentiable.
  at::Tensor output;
  /// The softmax dim, in [-output.dim(), output.dim() - 1] ([-1, 0] for a 0-d output).
  int64_t dim;
};

/// grad_input = y * (g - sum(g * y, dim)): softmax's VJP (the Jacobian of softmax is
/// diag(y) - y y^T along dim). Where masked_softmax masked, y = 0 and so grad_input = 0 (for a
/// finite g), without the mask. A new contiguous tensor of output's shape and dtype.
/// masked_softmax's backward calls it on plain tensors (CPU and CUDA kernels: one read of g
/// and y per slice, the slice kept in cache for the second pass, one write); tensor subclasses
/// (DTensor, fake tensors) run the same formula in ATen ops.
///
/// Its own backward: with cotangent c, s = sum(g * y) and t = sum(c * y) along dim,
///   grad of g = y * (c - t)  (this op on (c, y): the Jacobian in g is symmetric),
///   grad of y = c * (g - s) - g * t.
/// Its JVP: d = op(dg, y) + dy * (g - s) - y * sum(g * dy). vmap folds the batch into the
/// slices.
/// \returns the op `customop::masked_softmax_backward`, registered when libcustomop_ops loads.
/// \throws c10::Error naming `masked_softmax_backward` and `grad` when grad's device or shape
///         is not output's; c10::TypeError when output's dtype is not supported or grad's is
///         not output's; c10::ValueError when dim is out of range.
///
/// Example:
///   using customop::ops::MaskedSoftmaxBackwardArgs;
///   at::Tensor y = at::softmax(at::randn({2, 5}), -1), g = at::randn({2, 5});
///   at::Tensor gx = customop::ops::masked_softmax_backward_op()(
///       MaskedSoftmaxBackwardArgs{.grad = g, .output = y, .dim = -1});
Op<MaskedSoftmaxBackwardArgs>& masked_softmax_backward_op();

}  // namespace customop::ops
