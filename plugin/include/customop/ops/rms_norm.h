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
  /// float16 or bfloat16 (CPU and CUDA; reduced in float32, rounded once). Differentiable.
  at::Tensor input;
  /// Per-feature scale w, shape [D], the dtype and device of input. Differentiable.
  at::Tensor weight;
  /// Added to mean(x^2) before the reciprocal square root; unitless, >= 0.
  /// Schema default 1e-6. NB: the field has no initializer, so a C++ caller that omits it
  /// passes 0.0.
  double eps;
};

/// y = x * rsqrt(mean(x^2 over the last dim) + eps) * w, one row at a time.
///
/// Backward: grads for input and weight (weight's summed over all leading dims).
/// \returns the op `customop::rms_norm`, registered when libcustomop_ops loads. Called with
///          input: [..., D]; weight: [D]; same dtype and device; eps >= 0, it returns a new
///          contiguous tensor shaped like input, of its dtype.
/// \throws c10::Error naming `rms_norm` and the argument when the devices differ, input is
///         0-d, or weight is not [D]; c10::TypeError when a dtype is not supported or
///         differs; c10::ValueError when eps < 0 (or NaN).
///         Calls through the op also throw as Op::operator() (c10::NotImplementedError with
///         no kernel for the device, e.g. CUDA in a CPU-only build; c10::TypeError for an
///         undefined tensor); a failed CUDA launch throws c10::Error.
///
/// Example:
///   using customop::ops::RmsNormArgs;
///   at::Tensor x = at::randn({8, 64}), w = at::ones({64});
///   at::Tensor y = customop::ops::rms_norm_op()(RmsNormArgs{.input = x, .weight = w, .eps = 1e-6});
Op<RmsNormArgs>& rms_norm_op();

}  // namespace customop::ops
