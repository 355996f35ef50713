#pragma once
/// \file
/// `customop::weighted_sum`: sum_k w_k * x_k over a list of same-shaped tensors, in one pass
/// (torch.stack(inputs).mul(w.view(-1, 1, ...)).sum(0), rounded once).

#include <customop/op.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace customop::ops {

/// Arguments of `customop::weighted_sum(Tensor[] inputs, float[] weights) -> Tensor`.
struct WeightedSumArgs {
  /// x_1..x_K (K >= 1), all of one shape (any, 0-d included; any strides), dtype and device;
  /// float32 or float64 (CPU and CUDA), float16 or bfloat16 (CUDA; accumulated in float32).
  /// Differentiable.
  std::vector<at::Tensor> inputs;
  /// w_1..w_K, unitless, one per tensor in inputs. No default.
  std::vector<double> weights;
};

/// y = sum_k w_k * x_k, accumulated in the dtype (float32 for float16/bfloat16).
///
/// - inputs: K >= 1 tensors of one shape, dtype and device; weights: K numbers.
/// - Returns a new contiguous tensor of the inputs' shape and dtype.
/// - Backward: grad of inputs[k] = w_k * grad_output.
/// - Throws c10::Error naming `weighted_sum` and the argument when inputs is empty, the
///   inputs differ in device, dtype or shape, the dtype is not supported, or
///   weights.size() != inputs.size().
///
/// Example:
///   using customop::ops::WeightedSumArgs;
///   at::Tensor a = at::randn({4}), b = at::randn({4});
///   at::Tensor y = customop::ops::weighted_sum_op()(WeightedSumArgs{.inputs = {a, b}, .weights = {0.5, 2.0}});
Op<WeightedSumArgs>& weighted_sum_op();

}  // namespace customop::ops
