#pragma once
// What the files of customop::rms_norm share: the argument checks and the kernels.

#include <customop/ops/rms_norm.h>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of rms_norm for a kernel of `device`.
void check_rms_norm(const RmsNormArgs& args, c10::DeviceType device);

/// The forward kernels, writing into the outputs op.shape allocated (cpu/rms_norm_cpu.cpp,
/// cuda/rms_norm_cuda.cpp).
void rms_norm_cpu(const RmsNormArgs& args, const at::Tensor& out);
void rms_norm_cuda(const RmsNormArgs& args, const at::Tensor& out);

}  // namespace customop::ops::detail
