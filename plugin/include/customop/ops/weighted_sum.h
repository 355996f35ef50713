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
  /// float32 or float64 (CPU and CUDA), float16 or bfloat16 (CPU and CUDA; accumulated in float32).
  /// Differentiable.
  std::vector<at::Tensor> inputs;
  /// w_1..w_K, unitless, one per tensor in inputs. No default.
  std::vector<double> weights;
};

/// y = sum_k w_k * x_k, accumulated in the dtype (float32 for float16/bfloat16).
///
/// Backward: grad of inputs[k] = w_k * grad_output.
/// \returns the op `customop::weighted_sum`, registered when libcustomop_ops loads. Called
///          with inputs: K >= 1 tensors of one shape, dtype and device; weights: K numbers, it
///          returns a new contiguous tensor of the inputs' shape and dtype.
/// \throws c10::Error naming `weighted_sum` and the argument when inputs is empty (through
///         the dispatcher: "no tensor to run on"; the kernels' own check is a c10::ValueError),
///         or the inputs differ in device or shape; c10::TypeError when the dtype is not
///         supported or the inputs' dtypes differ; c10::ValueError when
///         weights.size() != inputs.size().
///         Calls through the op also throw as Op::operator() (c10::NotImplementedError with
///         no kernel for the device, e.g. CUDA in a CPU-only build; c10::TypeError for an
///         undefined tensor); a failed CUDA launch throws c10::Error.
///
/// Example:
///   using customop::ops::WeightedSumArgs;
///   at::Tensor a = at::randn({4}), b = at::randn({4});
///   at::Tensor y = customop::ops::weighted_sum_op()(WeightedSumArgs{.inputs = {a, b}, .weights = {0.5, 2.0}});
Op<WeightedSumArgs>& weighted_sum_op();

}  // namespace customop::ops
