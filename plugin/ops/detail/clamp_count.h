#pragma once
// What the files of customop::clamp_count share: the argument checks and the kernels.

#include <customop/ops/clamp_count.h>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of clamp_count for a kernel of `device`.
void check_clamp_count(const ClampCountArgs& args, c10::DeviceType device);

/// The forward kernels, writing into the outputs op.shape allocated (cpu/clamp_count_cpu.cpp,
/// cuda/clamp_count_cuda.cpp).
void clamp_count_cpu(const ClampCountArgs& args, const ClampCountResult& out);
void clamp_count_cuda(const ClampCountArgs& args, const ClampCountResult& out);

}  // namespace customop::ops::detail
