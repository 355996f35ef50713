#pragma once
/// \file
/// `customop::bias_gelu_backward`: the backward of `customop::bias_gelu` in one pass, the grad
/// of the input and of the bias from the incoming grad (torch's gelu_backward fused with the
/// bias's sum over the rows).

#include <customop/op.h>

#include <ATen/core/Tensor.h>

#include <string>
#include <tuple>

namespace customop::ops {

/// Arguments of `customop::bias_gelu_backward(Tensor grad, Tensor input, Tensor bias,
/// str approximate="none") -> (Tensor grad_input, Tensor grad_bias)`.
struct BiasGeluBackwardArgs {
  /// g, the grad of bias_gelu's output: input's shape, dtype and device (any strides).
  /// Differentiable.
  at::Tensor grad;
  /// x, shape [..., D] (at least 1-d; any strides), float32 or float64 (CPU and CUDA), float16
  /// or bfloat16 (CPU and CUDA; computed in float32, rounded once). Differentiable.
  at::Tensor input;
  /// b, shape [D], the dtype and device of input. Differentiable.
  at::Tensor bias;
  /// "none" (exact GELU) or "tanh", as bias_gelu's. NB: no initializer, as BiasGeluArgs.
  std::string approximate;
};

/// (grad_input, grad_bias).
using BiasGeluBackwardResult = std::tuple<at::Tensor, at::Tensor>;

/// With s = x + b (rounded to the dtype, as the forward), grad_input = g * gelu'(s) (input's
/// shape) and grad_bias = grad_input summed over every leading dim ([D]; summed in the compute
/// dtype before the one rounding), where
///   exact: gelu'(s) = Phi(s) + s phi(s), phi(s) = exp(-s^2 / 2) / sqrt(2 pi), Phi its CDF;
///   tanh:  gelu'(s) = (1 + t) / 2 + s (1 - t^2) u' / 2, t = tanh(u),
///          u = sqrt(2 / pi) (s + 0.044715 s^3), u' = sqrt(2 / pi) (1 + 3 * 0.044715 s^2)
/// (the derivatives of Hendrycks & Gimpel's 2016 GELU and of its tanh form). At s = +-inf the
/// exact form gives the limits 1 and 0 (ATen's gelu_backward: NaN).
///
/// bias_gelu's backward calls this op (CPU and CUDA kernels: one pass over g and x, where the
/// ATen formula took ten); double backward runs through its own formula (gelu''), forward-mode
/// AD through its JVP, vmap one example at a time.
/// \returns the op `customop::bias_gelu_backward`, registered when libcustomop_ops loads.
/// \throws as bias_gelu for input, bias and approximate; c10::Error naming `grad` when its
///         device or shape is not input's, c10::TypeError when its dtype is not input's.
///
/// Example:
///   using customop::ops::BiasGeluBackwardArgs;
///   at::Tensor x = at::randn({8, 64}), b = at::randn({64}), g = at::randn({8, 64});
///   auto [gx, gb] = customop::ops::bias_gelu_backward_op()(
///       BiasGeluBackwardArgs{.grad = g, .input = x, .bias = b, .approximate = "none"});
Op<BiasGeluBackwardArgs, BiasGeluBackwardResult>& bias_gelu_backward_op();

}  // namespace customop::ops
