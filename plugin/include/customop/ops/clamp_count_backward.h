#pragma once
/// \file
/// `customop::clamp_count_backward`: the backward of `customop::clamp_count` in one pass: the
/// incoming grad where the input lies within the bounds, 0 elsewhere.

#include <customop/op.h>

#include <ATen/core/Tensor.h>

namespace customop::ops {

/// Arguments of `customop::clamp_count_backward(Tensor grad, Tensor input, float min,
/// float max) -> Tensor`.
struct ClampCountBackwardArgs {
  /// g, the grad of clamp_count's output: input's shape, dtype and device (any strides).
  /// Differentiable.
  at::Tensor grad;
  /// x, any shape (0-d included; any strides), float32 or float64 (CPU and CUDA), float16 or
  /// bfloat16 (CPU and CUDA). Not differentiable (the result is piecewise constant in it).
  at::Tensor input;
  /// The bounds, min <= max (neither NaN), rounded to input's dtype as clamp_count's are.
  double min;
  double max;
};

/// grad_input = g where min <= x <= max (the bounds included), 0 elsewhere and where x is NaN;
/// a new contiguous tensor of input's shape and dtype. clamp_count's backward calls it on
/// plain tensors (CPU and CUDA kernels: one read of g and x, one write); tensor subclasses
/// (DTensor, fake tensors) run the same formula in ATen ops. Its own backward is itself again
/// (linear in g), its JVP likewise; vmap folds the batch into the elements.
/// \returns the op `customop::clamp_count_backward`, registered when libcustomop_ops loads.
/// \throws as clamp_count for input, min and max; c10::Error naming `grad` when its device or
///         shape is not input's, c10::TypeError when its dtype is not input's.
///
/// Example:
///   using customop::ops::ClampCountBackwardArgs;
///   at::Tensor x = at::randn({8}), g = at::ones({8});
///   at::Tensor gx = customop::ops::clamp_count_backward_op()(
///       ClampCountBackwardArgs{.grad = g, .input = x, .min = -0.5, .max = 0.5});
Op<ClampCountBackwardArgs>& clamp_count_backward_op();

}  // namespace customop::ops
