#pragma once
// What the files of customop::masked_softmax share: the argument checks and the kernels.

#include <customop/ops/masked_softmax.h>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of masked_softmax for a kernel of `device`.
void check_masked_softmax(const MaskedSoftmaxArgs& args, c10::DeviceType device);

/// The forward kernels (cpu/masked_softmax_cpu.cpp, cuda/masked_softmax_cuda.cpp).
at::Tensor masked_softmax_cpu(const MaskedSoftmaxArgs& args);
at::Tensor masked_softmax_cuda(const MaskedSoftmaxArgs& args);

}  // namespace customop::ops::detail
