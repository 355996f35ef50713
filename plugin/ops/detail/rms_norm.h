#pragma once
// What the files of customop::rms_norm and customop::rms_norm_backward share: the argument
// checks, the kernels and the ATen formula of the backward.

#include <customop/ops/rms_norm.h>
#include <customop/ops/rms_norm_backward.h>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of input, weight and eps for a kernel of `device`;
/// messages name `op`.
void check_rms_norm_args(const char* op, const at::Tensor& input, const at::Tensor& weight,
                         double eps, c10::DeviceType device);

/// Device, dtype, shape and value checks of rms_norm for a kernel of `device`.
void check_rms_norm(const RmsNormArgs& args, c10::DeviceType device);

/// Those of rms_norm_backward: rms_norm's, then grad against input.
void check_rms_norm_backward(const RmsNormBackwardArgs& args, c10::DeviceType device);

/// The forward kernels, writing into the outputs op.shape allocated (cpu/rms_norm_cpu.cpp,
/// cuda/rms_norm_cuda.cpp).
void rms_norm_cpu(const RmsNormArgs& args, const at::Tensor& out);
void rms_norm_cuda(const RmsNormArgs& args, const at::Tensor& out);

/// The backward kernels (cpu/rms_norm_backward_cpu.cpp, cuda/rms_norm_backward_cuda.cpp).
void rms_norm_backward_cpu(const RmsNormBackwardArgs& args, const RmsNormBackwardResult& out);
void rms_norm_backward_cuda(const RmsNormBackwardArgs& args, const RmsNormBackwardResult& out);

/// rms_norm_backward in ATen ops (differentiable): its reference and double backward, and
/// rms_norm's backward under grad mode, torch.func and on tensor subclasses.
RmsNormBackwardResult rms_norm_backward_composite(const RmsNormBackwardArgs& args);

}  // namespace customop::ops::detail
