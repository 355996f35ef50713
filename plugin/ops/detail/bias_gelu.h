#pragma once
// What the files of customop::bias_gelu and customop::bias_gelu_backward share: the argument
// checks, the kernels and the ATen formulas of the derivatives.

#include <customop/ops/bias_gelu.h>
#include <customop/ops/bias_gelu_backward.h>

#include <string>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of input, bias and approximate for a kernel of
/// `device`; messages name `op`.
void check_bias_gelu_args(const char* op, const at::Tensor& input, const at::Tensor& bias,
                          const std::string& approximate, c10::DeviceType device);

/// Device, dtype, shape and value checks of bias_gelu for a kernel of `device`.
void check_bias_gelu(const BiasGeluArgs& args, c10::DeviceType device);

/// Those of bias_gelu_backward: bias_gelu's, then grad against input.
void check_bias_gelu_backward(const BiasGeluBackwardArgs& args, c10::DeviceType device);

/// The forward kernels, writing into the outputs op.shape allocated (cpu/bias_gelu_cpu.cpp,
/// cuda/bias_gelu_cuda.cpp).
void bias_gelu_cpu(const BiasGeluArgs& args, const at::Tensor& out);
void bias_gelu_cuda(const BiasGeluArgs& args, const at::Tensor& out);

/// The backward kernels (cpu/bias_gelu_backward_cpu.cpp, cuda/bias_gelu_backward_cuda.cpp).
void bias_gelu_backward_cpu(const BiasGeluBackwardArgs& args, const BiasGeluBackwardResult& out);
void bias_gelu_backward_cuda(const BiasGeluBackwardArgs& args, const BiasGeluBackwardResult& out);

/// gelu'(s) and gelu''(s) in ATen ops, elementwise, s of any floating dtype (formulas in
/// bias_gelu_backward.cpp); `tanh` picks the tanh approximation.
at::Tensor gelu_derivative(const at::Tensor& s, bool tanh);
at::Tensor gelu_second_derivative(const at::Tensor& s, bool tanh);

/// bias_gelu_backward in ATen ops: its reference, and bias_gelu's backward on tensor
/// subclasses (DTensor, whose sharding of the ATen ops this keeps).
BiasGeluBackwardResult bias_gelu_backward_composite(const BiasGeluBackwardArgs& args);

}  // namespace customop::ops::detail
