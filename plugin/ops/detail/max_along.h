#pragma once
// What the files of customop::max_along and customop::max_along_backward share: the argument
// checks, the kernels and the ATen formula of the backward.

#include <customop/ops/max_along.h>
#include <customop/ops/max_along_backward.h>

#include <vector>

namespace customop::ops::detail {

/// Device, dtype, shape and value checks of max_along for a kernel of `device`.
/// Returns `dim` wrapped into [0, input.dim()) (0 for a 0-d input), so kernels wrap it once.
/// Throws c10::Error naming the argument, expected vs actual.
int64_t check_max_along(const MaxAlongArgs& args, c10::DeviceType device);

/// The returns' shape: input's without `dim` (wrapped), or with size 1 there for keepdim;
/// 0-d for a 0-d input. `Size` is int64_t (kernels) or c10::SymInt (the fake kernel).
template <class Size>
std::vector<Size> max_along_out_sizes(c10::ArrayRef<Size> input_sizes, int64_t dim, bool keepdim) {
  std::vector<Size> out = input_sizes.vec();
  if (out.empty()) return out;
  if (keepdim) {
    out[static_cast<size_t>(dim)] = 1;
  } else {
    out.erase(out.begin() + dim);
  }
  return out;
}

/// The forward kernels, writing into the outputs op.shape allocated (cpu/max_along_cpu.cpp,
/// cuda/max_along_cuda.cpp).
void max_along_cpu(const MaxAlongArgs& args, const MaxAlongResult& out);
void max_along_cuda(const MaxAlongArgs& args, const MaxAlongResult& out);

/// Checks of max_along_backward for a kernel of `device`. Returns dim wrapped into
/// [0, grad.dim()).
int64_t check_max_along_backward(const MaxAlongBackwardArgs& args, c10::DeviceType device);

/// The backward kernels (cpu/max_along_backward_cpu.cpp, cuda/max_along_backward_cuda.cpp).
void max_along_backward_cpu(const MaxAlongBackwardArgs& args, const at::Tensor& out);
void max_along_backward_cuda(const MaxAlongBackwardArgs& args, const at::Tensor& out);

/// max_along_backward in ATen ops (zeros, then scatter): its reference.
at::Tensor max_along_backward_composite(const MaxAlongBackwardArgs& args);

}  // namespace customop::ops::detail
