#pragma once
/// \file
/// `customop::bias_gelu`: GELU of input plus a bias broadcast over the last dim, fused
/// (Hendrycks & Gimpel 2016, "Gaussian Error Linear Units";
/// torch.nn.functional.gelu(input + bias, approximate=...)).

#include <customop/op.h>

#include <ATen/core/Tensor.h>

#include <string>

namespace customop::ops {

/// Arguments of `customop::bias_gelu(Tensor input, Tensor bias, str approximate="none")
/// -> Tensor`.
struct BiasGeluArgs {
  /// x, shape [..., D] (at least 1-d; any strides), float32 or float64 (CPU and CUDA),
  /// float16 or bfloat16 (CPU and CUDA; computed in float32, rounded once). Differentiable.
  at::Tensor input;
  /// b, shape [D], the dtype and device of input; added to every row. Differentiable.
  at::Tensor bias;
  /// "none": exact GELU s * Phi(s) = 0.5 * s * (1 + erf(s / sqrt(2)));
  /// "tanh": 0.5 * s * (1 + tanh(sqrt(2 / pi) * (s + 0.044715 * s^3))).
  /// Schema default "none". NB: the field has no initializer, so a C++ caller that omits it
  /// passes "" and is refused.
  std::string approximate;
};

/// y = gelu(x + b), s = x + b rounded to the dtype first (as the two ATen ops would).
/// Special values: gelu(+inf) = inf, NaN gives NaN; the exact form gives the limit
/// gelu(-inf) = 0 on every device and dtype, where ATen's order of operations gives NaN (the
/// tanh form gives NaN there, as ATen's). The backward's grad is the limit at +-inf (1, 0).
///
/// Backward: grads for input and bias (bias's summed over all leading dims).
/// \returns the op `customop::bias_gelu`, registered when libcustomop_ops loads. Called with
///          input: [..., D]; bias: [D]; same dtype and device; approximate: "none" or "tanh",
///          it returns a new contiguous tensor shaped like input, of its dtype.
/// \throws c10::Error naming `bias_gelu` and the argument when the devices differ, input is
///         0-d, or bias is not [D]; c10::TypeError when a dtype is not supported or differs;
///         c10::ValueError when approximate is unknown. Checks run in that order (device,
///         dtype, shape, value), in the CPU, CUDA and fake kernels alike.
///         Calls through the op also throw as Op::operator() (c10::NotImplementedError with
///         no kernel for the device, e.g. CUDA in a CPU-only build; c10::TypeError for an
///         undefined tensor); a failed CUDA launch throws c10::Error.
///
/// Example:
///   using customop::ops::BiasGeluArgs;
///   at::Tensor x = at::randn({8, 64}), b = at::randn({64});
///   at::Tensor y = customop::ops::bias_gelu_op()(BiasGeluArgs{.input = x, .bias = b, .approximate = "tanh"});
Op<BiasGeluArgs>& bias_gelu_op();

}  // namespace customop::ops
