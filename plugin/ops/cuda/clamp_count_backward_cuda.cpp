// CUDA glue of customop::clamp_count_backward: contiguous inputs, launch of
// cuda_kernels::launch_clamp_count_bwd on the current stream of input's device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/clamp_count_backward_params.h"
#include "detail/clamp_count.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void clamp_count_backward_cuda(const ClampCountBackwardArgs& a, const at::Tensor& out) {
  const c10::cuda::CUDAGuard guard(a.input.device());
  const at::Tensor g = a.grad.contiguous();
  const at::Tensor x = a.input.contiguous();
  cuda_kernels::ClampCountBackwardParams p;
  p.grad = g.const_data_ptr();
  p.input = x.const_data_ptr();
  p.grad_input = out.mutable_data_ptr();
  p.numel = x.numel();
  p.min = a.min;
  p.max = a.max;
  p.dtype = to_kernel_dtype(x.scalar_type());
  check_launch("clamp_count_backward",
               cuda_kernels::launch_clamp_count_bwd(p, at::cuda::getCurrentCUDAStream()));
}

}  // namespace customop::ops::detail
