#pragma once
// What the files of customop::masked_softmax and customop::masked_softmax_backward share: the
// argument checks, the kernels and the ATen formula of the backward.

#include <customop/ops/masked_softmax.h>
#include <customop/ops/masked_softmax_backward.h>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of masked_softmax for a kernel of `device`.
/// Returns `dim` wrapped into [0, input.dim()) (0 for a 0-d input), so kernels wrap it once.
/// Throws c10::Error naming the argument, expected vs actual.
int64_t check_masked_softmax(const MaskedSoftmaxArgs& args, c10::DeviceType device);

/// The forward kernels, writing into the outputs op.shape allocated (cpu/masked_softmax_cpu.cpp,
/// cuda/masked_softmax_cuda.cpp).
void masked_softmax_cpu(const MaskedSoftmaxArgs& args, const at::Tensor& out);
void masked_softmax_cuda(const MaskedSoftmaxArgs& args, const at::Tensor& out);

/// Checks of masked_softmax_backward for a kernel of `device` (output's dtype, grad against
/// output, dim). Returns dim wrapped as check_masked_softmax does.
int64_t check_masked_softmax_backward(const MaskedSoftmaxBackwardArgs& args,
                                      c10::DeviceType device);

/// The backward kernels (cpu/masked_softmax_backward_cpu.cpp,
/// cuda/masked_softmax_backward_cuda.cpp).
void masked_softmax_backward_cpu(const MaskedSoftmaxBackwardArgs& args, const at::Tensor& out);
void masked_softmax_backward_cuda(const MaskedSoftmaxBackwardArgs& args, const at::Tensor& out);

/// masked_softmax_backward in ATen ops, computed in float32 for float16/bfloat16 and rounded
/// once: its reference, and masked_softmax's backward on tensor subclasses.
at::Tensor masked_softmax_backward_composite(const MaskedSoftmaxBackwardArgs& args);

}  // namespace customop::ops::detail
