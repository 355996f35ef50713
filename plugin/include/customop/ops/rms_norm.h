#pragma once
/// \file
/// `customop::rms_norm`: root-mean-square normalisation over the last dim with a per-feature
/// weight (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization";
/// torch.nn.functional.rms_norm with normalized_shape = [D]).

#include <customop/op.h>

#include <ATen/core/Tensor.h>

namespace customop::ops {

/// Arguments of `customop::rms_norm(Tensor input, Tensor weight, float eps=1e-6) -> Tensor`.
struct RmsNormArgs {
  /// x, shape [..., D] (at least 1-d; any strides), float32 or float64 (CPU and CUDA),
  /// float16 or bfloat16 (CUDA; reduced in float32). Differentiable.
  at::Tensor input;
  /// Per-feature scale w, shape [D], the dtype and device of input. Differentiable.
  at::Tensor weight;
  /// Added to mean(x^2) before the reciprocal square root; unitless, >= 0.
  /// Schema default 1e-6.
  double eps;
};

/// y = x * rsqrt(mean(x^2 over the last dim) + eps) * w, one row at a time.
///
/// - input: [..., D]; weight: [D]; same dtype and device; eps >= 0.
/// - Returns a new contiguous tensor shaped like input, of its dtype.
/// - Backward: grads for input and weight (weight's summed over all leading dims).
/// - Throws c10::Error naming `rms_norm` and the argument when the devices differ, a dtype
///   is not supported or differs, input is 0-d, weight is not [D], or eps < 0.
///
/// Example:
///   using customop::ops::RmsNormArgs;
///   at::Tensor x = at::randn({8, 64}), w = at::ones({64});
///   at::Tensor y = customop::ops::rms_norm_op()(RmsNormArgs{.input = x, .weight = w, .eps = 1e-6});
Op<RmsNormArgs>& rms_norm_op();

}  // namespace customop::ops
