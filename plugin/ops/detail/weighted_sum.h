#pragma once
// What the files of customop::weighted_sum share: the argument checks and the kernels.

#include <customop/ops/weighted_sum.h>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of weighted_sum for a kernel of `device`.
void check_weighted_sum(const WeightedSumArgs& args, c10::DeviceType device);

/// The forward kernels, writing into the outputs op.shape allocated (cpu/weighted_sum_cpu.cpp,
/// cuda/weighted_sum_cuda.cpp).
void weighted_sum_cpu(const WeightedSumArgs& args, const at::Tensor& out);
void weighted_sum_cuda(const WeightedSumArgs& args, const at::Tensor& out);

}  // namespace customop::ops::detail
