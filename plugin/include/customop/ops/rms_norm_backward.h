#pragma once
/// \file
/// `customop::rms_norm_backward`: the backward of `customop::rms_norm` in one pass, the grads
/// of the input and of the weight from the incoming grad.

#include <customop/op.h>

#include <ATen/core/Tensor.h>

#include <tuple>

namespace customop::ops {

/// Arguments of `customop::rms_norm_backward(Tensor grad, Tensor input, Tensor weight,
/// float eps=1e-6) -> (Tensor grad_input, Tensor grad_weight)`.
struct RmsNormBackwardArgs {
  /// g, the grad of rms_norm's output: input's shape, dtype and device (any strides).
  /// Differentiable.
  at::Tensor grad;
  /// x, shape [..., D] (at least 1-d; any strides), float32 or float64 (CPU and CUDA), float16
  /// or bfloat16 (CPU and CUDA; computed in float32, rounded once). Differentiable.
  at::Tensor input;
  /// w, shape [D], the dtype and device of input. Differentiable.
  at::Tensor weight;
  /// Added to mean(x^2) before the rsqrt, >= 0, as rms_norm's. Schema default 1e-6.
  double eps;
};

/// (grad_input, grad_weight).
using RmsNormBackwardResult = std::tuple<at::Tensor, at::Tensor>;

/// With r = rsqrt(mean(x^2) + eps) over the last dim (rms_norm's y = x r w; Zhang & Sennrich
/// 2019, "Root Mean Square Layer Normalization"), differentiated by hand:
///   grad_input  = r g w - r^3 mean(g w x) x      (input's shape)
///   grad_weight = g x r summed over every leading dim      ([D])
/// computed in the accumulate dtype (float32 for float16/bfloat16) and rounded once.
///
/// rms_norm's backward calls this op (CPU and CUDA kernels: one read of g and x per row)
/// when it runs without grad mode on plain tensors, the ordinary backward of a training step;
/// a backward with create_graph=True, torch.func's transforms and tensor subclasses (DTensor,
/// fake tensors) run the same formula in ATen ops. Its own backward differentiates that ATen
/// formula (double backward to any order); its JVP is that formula's differential, derived by
/// hand (rms_norm_backward.cpp); vmap runs it one example at a time.
/// \returns the op `customop::rms_norm_backward`, registered when libcustomop_ops loads.
/// \throws as rms_norm for input, weight and eps; c10::Error naming `grad` when its device or
///         shape is not input's, c10::TypeError when its dtype is not input's.
///
/// Example:
///   using customop::ops::RmsNormBackwardArgs;
///   at::Tensor x = at::randn({8, 64}), w = at::randn({64}), g = at::randn({8, 64});
///   auto [gx, gw] = customop::ops::rms_norm_backward_op()(
///       RmsNormBackwardArgs{.grad = g, .input = x, .weight = w, .eps = 1e-6});
Op<RmsNormBackwardArgs, RmsNormBackwardResult>& rms_norm_backward_op();

}  // namespace customop::ops
