// CUDA glue of customop::weighted_sum: checks, contiguous inputs, output allocation, the input
// pointers and weights (in the kernel's parameters up to 16 inputs, else a device table copied
// from pinned memory), launch of cuda_kernels::launch_weighted_sum_fwd on the current stream
// of the inputs' device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/weighted_sum_params.h"
#include "detail/weighted_sum.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstring>
#include <vector>

namespace customop::ops::detail {

void weighted_sum_cuda(const WeightedSumArgs& a, const at::Tensor& y) {
  const c10::cuda::CUDAGuard guard(a.inputs[0].device());
  const auto k = static_cast<int64_t>(a.inputs.size());
  std::vector<at::Tensor> xs;
  xs.reserve(a.inputs.size());
  for (const auto& t : a.inputs) xs.push_back(t.contiguous());
  if (y.numel() == 0) return;

  cuda_kernels::WeightedSumParams p;
  // Up to kWeightedSumMaxHostTable inputs: the pointers and weights go into the kernel's
  // parameters (no copy on the stream: the op can be captured in a CUDA graph, and a call
  // costs no host-to-device transfer). More: a device table, copied from pinned memory.
  std::vector<const void*> ptrs(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i)
    ptrs[static_cast<size_t>(i)] = xs[static_cast<size_t>(i)].const_data_ptr();
  at::Tensor dev_table;
  if (k <= cuda_kernels::kWeightedSumMaxHostTable) {
    p.inputs = ptrs.data();
    p.weights = a.weights.data();
    p.table_on_host = true;
  } else {
    TORCH_CHECK(c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None,
                "weighted_sum: inputs must have at most ", cuda_kernels::kWeightedSumMaxHostTable,
                " tensors to be captured in a CUDA graph, but got ", k);
    // One 8-byte slot per pointer, then one per weight: [ptr_0 .. ptr_K-1, w_0 .. w_K-1].
    at::Tensor table = at::empty({2 * k}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
    auto* slots = table.mutable_data_ptr<int64_t>();
    for (int64_t i = 0; i < k; ++i) {
      std::memcpy(&slots[i], &ptrs[static_cast<size_t>(i)], sizeof(const void*));
      std::memcpy(&slots[k + i], &a.weights[static_cast<size_t>(i)], sizeof(double));
    }
    // NB: the copy is stream-ordered before the launch below; the caching host allocator keeps
    // the pinned block until the copy is done, and the device allocator does not hand the
    // device table to another stream before the kernel is done with it.
    dev_table = table.to(y.device(), /*non_blocking=*/true);
    const auto* dev_slots = dev_table.const_data_ptr<int64_t>();
    p.inputs = reinterpret_cast<const void* const*>(dev_slots);
    p.weights = reinterpret_cast<const double*>(dev_slots + k);
  }
  p.output = y.mutable_data_ptr();
  p.k = k;
  p.numel = y.numel();
  p.dtype = to_kernel_dtype(y.scalar_type());
  check_launch("weighted_sum",
               cuda_kernels::launch_weighted_sum_fwd(p, at::cuda::getCurrentCUDAStream()));
}

}  // namespace customop::ops::detail
