#pragma once
/// \file
/// The fused bias + leaky ReLU on tensors: argument checks, then the kernels of kernels.h on
/// the tensor's device. Both registrations of the op (customop and by hand) call these, so
/// they differ in their glue only.

#include <ATen/core/Tensor.h>

#include <tuple>

namespace flrelu {

/// out = scale * leaky_relu(x + bias, negative_slope), bias broadcast over dim 1.
///
/// - x: [N, C, *] (at least 2-d, any strides), float32 or float64, CPU or CUDA.
/// - bias: [C], x's dtype and device.
/// - negative_slope >= 0 and scale > 0 (the backward reads the mask off the output).
/// - Returns a new contiguous tensor shaped like x.
/// - Throws c10::Error naming `fused_bias_leaky_relu` and the argument when a shape, dtype,
///   device or value is not as above.
at::Tensor fused_forward(const at::Tensor& x, const at::Tensor& bias, double negative_slope,
                         double scale);

/// The backward kernel: (grad_x, grad_bias) for the output `out` of fused_forward and the
/// grad of that output `grad` (out's shape, dtype and device): grad_x = grad * scale *
/// (out > 0 ? 1 : negative_slope), grad_bias = grad_x summed over every dim but 1.
/// Throws c10::Error naming `fused_bias_leaky_relu_backward` and the argument on a mismatch.
std::tuple<at::Tensor, at::Tensor> fused_backward(const at::Tensor& grad, const at::Tensor& out,
                                                  double negative_slope, double scale);

/// Output metadata only (the fake kernels): what fused_forward / fused_backward return, with
/// symbolic shapes.
at::Tensor fused_forward_meta(const at::Tensor& x, const at::Tensor& bias, double negative_slope,
                              double scale);
std::tuple<at::Tensor, at::Tensor> fused_backward_meta(const at::Tensor& grad,
                                                       const at::Tensor& out, double negative_slope,
                                                       double scale);

/// A grad of the bias, [C], as a [1, C, 1, ...] tensor that broadcasts against `like` ([N, C,
/// *]): the double backward adds it to the grad of grad_x.
at::Tensor bias_as_input(const at::Tensor& grad_bias, const at::Tensor& like);

}  // namespace flrelu
