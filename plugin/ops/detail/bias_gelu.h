#pragma once
// What the files of customop::bias_gelu share: the argument checks and the kernels.

#include <customop/ops/bias_gelu.h>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of bias_gelu for a kernel of `device`.
void check_bias_gelu(const BiasGeluArgs& args, c10::DeviceType device);

/// The forward kernels, writing into the outputs op.shape allocated (cpu/bias_gelu_cpu.cpp,
/// cuda/bias_gelu_cuda.cpp).
void bias_gelu_cpu(const BiasGeluArgs& args, const at::Tensor& out);
void bias_gelu_cuda(const BiasGeluArgs& args, const at::Tensor& out);

}  // namespace customop::ops::detail
