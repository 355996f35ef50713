// CUDA glue of customop::weighted_sum: checks, contiguous inputs, the device table of input
// pointers and weights (one host-to-device copy), output allocation, launch of
// cuda_kernels::launch_weighted_sum_fwd on the current stream of the inputs' device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/weighted_sum_params.h"
#include "detail/weighted_sum.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstring>
#include <vector>

namespace customop::ops::detail {

at::Tensor weighted_sum_cuda(const WeightedSumArgs& a) {
  check_weighted_sum(a, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(a.inputs[0].device());
  const auto k = static_cast<int64_t>(a.inputs.size());
  std::vector<at::Tensor> xs;
  xs.reserve(a.inputs.size());
  for (const auto& t : a.inputs) xs.push_back(t.contiguous());
  at::Tensor y = at::empty(xs[0].sizes(), xs[0].options());
  if (y.numel() == 0) return y;

  // One 8-byte slot per pointer, then one per weight: [ptr_0 .. ptr_K-1, w_0 .. w_K-1].
  at::Tensor table = at::empty({2 * k}, at::TensorOptions().dtype(at::kLong));
  auto* slots = table.mutable_data_ptr<int64_t>();
  for (int64_t i = 0; i < k; ++i) {
    const void* ptr = xs[static_cast<size_t>(i)].const_data_ptr();
    std::memcpy(&slots[i], &ptr, sizeof(ptr));
    std::memcpy(&slots[k + i], &a.weights[static_cast<size_t>(i)], sizeof(double));
  }
  // NB: the copy is stream-ordered before the launch below, and the caching allocator does
  // not hand the device table to another stream before the kernel is done with it.
  const at::Tensor dev_table = table.to(y.device(), /*non_blocking=*/true);
  const auto* dev_slots = dev_table.const_data_ptr<int64_t>();

  cuda_kernels::WeightedSumParams p;
  p.inputs = reinterpret_cast<const void* const*>(dev_slots);
  p.weights = reinterpret_cast<const double*>(dev_slots + k);
  p.output = y.mutable_data_ptr();
  p.k = k;
  p.numel = y.numel();
  p.dtype = to_kernel_dtype(y.scalar_type());
  check_launch("weighted_sum",
               cuda_kernels::launch_weighted_sum_fwd(p, at::cuda::getCurrentCUDAStream()));
  return y;
}

}  // namespace customop::ops::detail
