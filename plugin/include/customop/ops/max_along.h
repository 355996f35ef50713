#pragma once
/// \file
/// `customop::max_along`: the max of a tensor along one dim and where it is
/// (torch.max(input, dim, keepdim)).

#include <customop/op.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace customop::ops {

/// Arguments of `customop::max_along(Tensor input, int dim, bool keepdim=False)
/// -> (Tensor values, Tensor indices)`.
struct MaxAlongArgs {
  /// x, any shape (0-d included; any strides) with input.size(dim) > 0; float32 or float64
  /// (CPU and CUDA), float16 or bfloat16 (CPU and CUDA; compared in float32, exact).
  /// Differentiable.
  at::Tensor input;
  /// The dim to reduce, in [-input.dim(), input.dim() - 1] ([-1, 0] for a 0-d input).
  int64_t dim;
  /// Keep the reduced dim with size 1 in both returns. Schema default false.
  bool keepdim;
};

/// (values, indices) of the max along `dim`: values of input's dtype, indices int64
/// (non-differentiable), both shaped like input without `dim` (size 1 with keepdim).
using MaxAlongResult = std::tuple<at::Tensor, at::Tensor>;

/// The max along one dim, as torch.max(input, dim, keepdim): ties give the first index; a
/// NaN in a slice gives value NaN at the index of the first NaN.
///
/// Backward: the gradient of values flows to the argmax positions.
/// \returns the op `customop::max_along`, registered when libcustomop_ops loads; it returns
///          new contiguous tensors (MaxAlongResult).
/// \throws c10::TypeError naming `max_along` and the argument for an unsupported dtype;
///         c10::ValueError for dim out of range; c10::Error for an empty dim to reduce.
///         Calls through the op also throw as Op::operator() (c10::NotImplementedError with
///         no kernel for the device, e.g. CUDA in a CPU-only build; c10::TypeError for an
///         undefined tensor); a failed CUDA launch throws c10::Error.
///
/// Example:
///   using customop::ops::MaxAlongArgs;
///   at::Tensor x = at::randn({4, 5});
///   auto [values, indices] = customop::ops::max_along_op()(MaxAlongArgs{.input = x, .dim = 1, .keepdim = false});
Op<MaxAlongArgs, MaxAlongResult>& max_along_op();

}  // namespace customop::ops
