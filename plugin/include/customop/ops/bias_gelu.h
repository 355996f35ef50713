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
  /// float16 or bfloat16 (CUDA; computed in float32). Differentiable.
  at::Tensor input;
  /// b, shape [D], the dtype and device of input; added to every row. Differentiable.
  at::Tensor bias;
  /// "none": exact GELU s * Phi(s) = 0.5 * s * (1 + erf(s / sqrt(2)));
  /// "tanh": 0.5 * s * (1 + tanh(sqrt(2 / pi) * (s + 0.044715 * s^3))).
  /// Schema default "none".
  std::string approximate;
};

/// y = gelu(x + b), s = x + b rounded to the dtype first (as the two ATen ops would).
///
/// - input: [..., D]; bias: [D]; same dtype and device; approximate: "none" or "tanh".
/// - Returns a new contiguous tensor shaped like input, of its dtype.
/// - Backward: grads for input and bias (bias's summed over all leading dims).
/// - Throws c10::Error naming `bias_gelu` and the argument when the devices differ, a dtype
///   is not supported or differs, input is 0-d, bias is not [D], or approximate is unknown.
///
/// Example:
///   using customop::ops::BiasGeluArgs;
///   at::Tensor x = at::randn({8, 64}), b = at::randn({64});
///   at::Tensor y = customop::ops::bias_gelu_op()(BiasGeluArgs{.input = x, .bias = b, .approximate = "tanh"});
Op<BiasGeluArgs>& bias_gelu_op();

}  // namespace customop::ops
