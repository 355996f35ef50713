// CUDA glue of customop::clamp_count: checks, contiguous input, output and a zeroed 0-dim
// device counter (the `clamped` return: no read-back, no stream sync), launch of
// cuda_kernels::launch_clamp_count_fwd on the current stream of input's device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/clamp_count_params.h"
#include "detail/clamp_count.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void clamp_count_cuda(const ClampCountArgs& a, const ClampCountResult& out) {
  const auto& [y, count] = out;
  const c10::cuda::CUDAGuard guard(a.input.device());
  const at::Tensor x = a.input.contiguous();
  count.zero_();  // the kernel adds into it
  if (x.numel() == 0) return;
  cuda_kernels::ClampCountParams p;
  p.input = x.const_data_ptr();
  p.output = y.mutable_data_ptr();
  // NB: the kernel adds with 64-bit atomics into an unsigned slot; the int64 tensor holds it.
  p.count = reinterpret_cast<unsigned long long*>(count.mutable_data_ptr<int64_t>());
  p.numel = x.numel();
  p.min = a.min;
  p.max = a.max;
  p.dtype = to_kernel_dtype(x.scalar_type());
  check_launch("clamp_count",
               cuda_kernels::launch_clamp_count_fwd(p, at::cuda::getCurrentCUDAStream()));
}

}  // namespace customop::ops::detail
