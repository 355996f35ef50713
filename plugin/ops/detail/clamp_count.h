#pragma once
// What the files of customop::clamp_count and customop::clamp_count_backward share: the
// argument checks, the kernels and the ATen formula of the backward.

#include <customop/ops/clamp_count.h>
#include <customop/ops/clamp_count_backward.h>

namespace customop::ops::detail {

/// Device, dtype and value checks of input, min and max for a kernel of `device`; messages
/// name `op`.
void check_clamp_count_args(const char* op, const at::Tensor& input, double min, double max,
                            c10::DeviceType device);

/// Device, dtype and value checks of clamp_count for a kernel of `device`.
void check_clamp_count(const ClampCountArgs& args, c10::DeviceType device);

/// Those of clamp_count_backward: clamp_count's, then grad against input.
void check_clamp_count_backward(const ClampCountBackwardArgs& args, c10::DeviceType device);

/// The forward kernels, writing into the outputs op.shape allocated (cpu/clamp_count_cpu.cpp,
/// cuda/clamp_count_cuda.cpp).
void clamp_count_cpu(const ClampCountArgs& args, const ClampCountResult& out);
void clamp_count_cuda(const ClampCountArgs& args, const ClampCountResult& out);

/// The backward kernels (cpu/clamp_count_backward_cpu.cpp, cuda/clamp_count_backward_cuda.cpp).
void clamp_count_backward_cpu(const ClampCountBackwardArgs& args, const at::Tensor& out);
void clamp_count_backward_cuda(const ClampCountBackwardArgs& args, const at::Tensor& out);

/// clamp_count_backward in ATen ops: its reference, and clamp_count's backward on tensor
/// subclasses.
at::Tensor clamp_count_backward_composite(const ClampCountBackwardArgs& args);

}  // namespace customop::ops::detail
