#pragma once
/// \file
/// `customop::fused_add_rms_norm_`: the residual add and RMS normalisation of a transformer
/// block, in place, as inference engines fuse them (vLLM's fused_add_rms_norm): residual +=
/// input, then input = rms_norm(residual) * weight (Zhang & Sennrich 2019, "Root Mean Square
/// Layer Normalization"). Both tensors are written; nothing is returned.

#include <customop/op.h>

#include <ATen/core/Tensor.h>

namespace customop::ops {

/// Arguments of `customop::fused_add_rms_norm_(Tensor(a!) input, Tensor(b!) residual,
/// Tensor weight, float eps=1e-6) -> ()`.
struct FusedAddRmsNormArgs {
  /// x, shape [..., D] (at least 1-d; any strides, not expanded), float16, bfloat16, float32
  /// or float64. Written: rms_norm(residual + x) * weight, rounded once to its dtype.
  MutableTensor input;
  /// r, input's shape, dtype and device; not sharing memory with input. Written: r + x,
  /// rounded to its dtype (the normalisation reads the rounded sum).
  MutableTensor residual;
  /// Per-feature scale w, shape [D], input's dtype and device. Read only.
  at::Tensor weight;
  /// Added to mean(s^2) before the reciprocal square root; unitless, >= 0. Schema default
  /// 1e-6. NB: the field has no initializer, so a C++ caller that omits it passes 0.0.
  double eps;
};

/// residual = residual + input; input = residual * rsqrt(mean(residual^2 over the last dim)
/// + eps) * weight, one row at a time, in float32 for float16/bfloat16 (float64 for float64).
/// No backward: calls under grad mode whose tensors require grad are refused (see
/// customop::MutableTensor).
/// \returns the op `customop::fused_add_rms_norm_`, registered when libcustomop_ops loads
/// \throws c10::Error naming `fused_add_rms_norm_` and the argument when devices, shapes or
///         dtypes differ, input is 0-d, weight is not [D], or a written tensor is expanded or
///         shares memory with another argument; c10::TypeError for a dtype that is not
///         floating; c10::ValueError when eps < 0. A refused call writes nothing.
/// Example:
///   using customop::ops::FusedAddRmsNormArgs;
///   at::Tensor h = at::randn({4, 64}), res = at::randn({4, 64}), w = at::ones({64});
///   customop::ops::fused_add_rms_norm_op()(FusedAddRmsNormArgs{h, res, w, 1e-6});
Op<FusedAddRmsNormArgs, void>& fused_add_rms_norm_op();

}  // namespace customop::ops
