#pragma once
// What the files of customop::max_along share: the argument checks and the kernels.

#include <customop/ops/max_along.h>

#include <vector>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of max_along for a kernel of `device`.
void check_max_along(const MaxAlongArgs& args, c10::DeviceType device);

/// The returns' shape: input's without `dim` (wrapped), or with size 1 there for keepdim;
/// 0-d for a 0-d input.
std::vector<int64_t> max_along_out_sizes(at::IntArrayRef input_sizes, int64_t dim, bool keepdim);

/// The forward kernels (cpu/max_along_cpu.cpp, cuda/max_along_cuda.cpp).
MaxAlongResult max_along_cpu(const MaxAlongArgs& args);
MaxAlongResult max_along_cuda(const MaxAlongArgs& args);

}  // namespace customop::ops::detail
