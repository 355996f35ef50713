#pragma once
// What the files of customop::masked_softmax share: the argument checks and the kernels.

#include <customop/ops/masked_softmax.h>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of masked_softmax for a kernel of `device`.
/// Returns `dim` wrapped into [0, input.dim()) (0 for a 0-d input), so kernels wrap it once.
/// Throws c10::Error naming the argument, expected vs actual.
int64_t check_masked_softmax(const MaskedSoftmaxArgs& args, c10::DeviceType device);

/// The forward kernels, writing into the outputs op.shape allocated (cpu/masked_softmax_cpu.cpp,
/// cuda/masked_softmax_cuda.cpp).
void masked_softmax_cpu(const MaskedSoftmaxArgs& args, const at::Tensor& out);
void masked_softmax_cuda(const MaskedSoftmaxArgs& args, const at::Tensor& out);

}  // namespace customop::ops::detail
