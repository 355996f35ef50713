#pragma once
/// \file
/// `customop::masked_softmax`: softmax along a dim over the elements a boolean mask keeps;
/// the others get 0 (torch.softmax(input.masked_fill(~mask, -inf), dim), with the NaN of a
/// fully masked slice replaced by zeros).

#include <customop/op.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace customop::ops {

/// Arguments of `customop::masked_softmax(Tensor input, Tensor? mask, int dim) -> Tensor`.
struct MaskedSoftmaxArgs {
  /// x, any shape (0-d included; any strides), float32 or float64 (CPU and CUDA), float16
  /// or bfloat16 (CPU and CUDA; computed in float32, rounded once). Differentiable.
  at::Tensor input;
  /// Keep-mask, bool, input's shape or broadcastable to it (true = take part, false = output
  /// 0), on input's device; std::nullopt (None) = plain softmax. Gets no gradient.
  std::optional<at::Tensor> mask;
  /// The softmax dim, in [-input.dim(), input.dim() - 1] ([-1, 0] for a 0-d input).
  int64_t dim;
};

/// y = exp(x - m) / sum(exp(x - m)) over the kept elements of each slice along `dim`
/// (m = max of the kept elements), 0 where masked; a fully masked slice gives zeros, never
/// NaN. As torch.softmax, a NaN among the kept elements makes the slice's kept outputs NaN.
///
/// Backward: grad of input = y * (g - sum(g * y, dim)) (0 where masked); mask gets None.
/// \returns the op `customop::masked_softmax`, registered when libcustomop_ops loads; it
///          returns a new contiguous tensor shaped like input, of its dtype.
/// \throws c10::Error naming `masked_softmax` and the argument when the devices differ or mask
///         does not broadcast to input; c10::TypeError when a dtype is not supported (mask
///         must be bool); c10::ValueError when dim is out of range.
///         Calls through the op also throw as Op::operator() (c10::NotImplementedError with
///         no kernel for the device, e.g. CUDA in a CPU-only build; c10::TypeError for an
///         undefined tensor); a failed CUDA launch throws c10::Error.
///
/// Example:
///   using customop::ops::MaskedSoftmaxArgs;
///   at::Tensor x = at::randn({2, 5}), keep = at::rand({2, 5}) > 0.3;
///   at::Tensor y = customop::ops::masked_softmax_op()(MaskedSoftmaxArgs{.input = x, .mask = keep, .dim = -1});
Op<MaskedSoftmaxArgs>& masked_softmax_op();

}  // namespace customop::ops
