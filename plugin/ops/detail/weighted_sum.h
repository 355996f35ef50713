#pragma once
// What the files of customop::weighted_sum and customop::weighted_sum_backward share: the
// argument checks, the kernels and the backward's ATen formula.

#include <customop/ops/weighted_sum.h>
#include <customop/ops/weighted_sum_backward.h>

#include <vector>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of weighted_sum for a kernel of `device`.
void check_weighted_sum(const WeightedSumArgs& args, c10::DeviceType device);

/// The forward kernels, writing into the outputs op.shape allocated (cpu/weighted_sum_cpu.cpp,
/// cuda/weighted_sum_cuda.cpp).
void weighted_sum_cpu(const WeightedSumArgs& args, const at::Tensor& out);
void weighted_sum_cuda(const WeightedSumArgs& args, const at::Tensor& out);

/// Those of weighted_sum_backward: grad's dtype for a kernel of `device`, at least one weight.
void check_weighted_sum_backward(const WeightedSumBackwardArgs& args, c10::DeviceType device);

/// The K outputs of weighted_sum_backward, after its checks: grad's shape, dtype and device,
/// contiguous, one allocation each (the CUDA kernel's and the fake kernel's; the CPU kernel
/// takes the same from the CPU output cache).
std::vector<at::Tensor> weighted_sum_backward_outputs(const WeightedSumBackwardArgs& args);

/// The backward kernels (cpu/weighted_sum_backward_cpu.cpp, cuda/weighted_sum_backward_cuda.cpp).
std::vector<at::Tensor> weighted_sum_backward_cpu(const WeightedSumBackwardArgs& args);
std::vector<at::Tensor> weighted_sum_backward_cuda(const WeightedSumBackwardArgs& args);

/// weighted_sum_backward in ATen ops (w_k * g per k): its reference.
std::vector<at::Tensor> weighted_sum_backward_composite(const WeightedSumBackwardArgs& args);

}  // namespace customop::ops::detail
