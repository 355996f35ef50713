#pragma once
// What the files of customop::fused_add_rms_norm_ share: the argument checks and the kernels.

#include <customop/ops/fused_add_rms_norm.h>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of fused_add_rms_norm_ (every device, the fake
/// kernel included); they run before anything is written.
void check_fused_add_rms_norm(const FusedAddRmsNormArgs& args);

/// The kernels (cpu/fused_add_rms_norm_cpu.cpp, cuda/fused_add_rms_norm_cuda.cpp): write
/// residual += input, then input = rms_norm(residual) * weight.
void fused_add_rms_norm_cpu(const FusedAddRmsNormArgs& args);
void fused_add_rms_norm_cuda(const FusedAddRmsNormArgs& args);

}  // namespace customop::ops::detail
