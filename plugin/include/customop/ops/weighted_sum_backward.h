#pragma once
/// \file
/// `customop::weighted_sum_backward`: the backward of `customop::weighted_sum` in one pass: the
/// grads of all K inputs, w_k * g, written together while g is read once.

#include <customop/op.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace customop::ops {

/// Arguments of `customop::weighted_sum_backward(Tensor grad, float[] weights) -> Tensor[]`.
struct WeightedSumBackwardArgs {
  /// g, the grad of weighted_sum's output: any shape (0-d included; any strides), float32 or
  /// float64 (CPU and CUDA), float16 or bfloat16 (CPU and CUDA; multiplied in float32).
  /// Differentiable.
  at::Tensor grad;
  /// w_1..w_K, K >= 1, unitless: weighted_sum's weights.
  std::vector<double> weights;
};

/// The K grads, out[k] = w_k * g: K new contiguous tensors of grad's shape and dtype (for
/// float16/bfloat16 each product is taken in float32 and rounded once, as ATen's grad * w),
/// written in one pass over g. weighted_sum's backward calls it on plain tensors; tensor
/// subclasses (DTensor, fake tensors) take grad * w_k in ATen ops. Linear in g: its own
/// backward is weighted_sum of the K cotangents with the same weights; its JVP is the op on
/// g's tangent; under vmap the batch rides along in g.
/// \returns the op `customop::weighted_sum_backward`, registered when libcustomop_ops loads.
/// \throws c10::ValueError naming `weighted_sum_backward` and `weights` when weights is
///         empty; c10::TypeError when grad's dtype is not supported.
///
/// Example:
///   using customop::ops::WeightedSumBackwardArgs;
///   at::Tensor g = at::ones({4});
///   std::vector<at::Tensor> grads = customop::ops::weighted_sum_backward_op()(
///       WeightedSumBackwardArgs{.grad = g, .weights = {0.5, 2.0}});  // 0.5 g, 2 g
Op<WeightedSumBackwardArgs, std::vector<at::Tensor>>& weighted_sum_backward_op();

}  // namespace customop::ops
