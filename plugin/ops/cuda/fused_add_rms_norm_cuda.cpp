// CUDA glue of customop::fused_add_rms_norm_: checks, contiguous working copies of written
// tensors that are not contiguous (copied back after the kernel), launch of
// cuda_kernels::launch_fused_add_rms_norm on the current stream of input's device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/fused_add_rms_norm_params.h"
#include "detail/fused_add_rms_norm.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void fused_add_rms_norm_cuda(const FusedAddRmsNormArgs& a) {
  const c10::cuda::CUDAGuard guard(a.input.device());
  const at::Tensor x = a.input.is_contiguous() ? at::Tensor(a.input) : a.input.contiguous();
  const at::Tensor res =
      a.residual.is_contiguous() ? at::Tensor(a.residual) : a.residual.contiguous();
  const at::Tensor w = a.weight.contiguous();
  const int64_t d = x.size(-1);
  cuda_kernels::FusedAddRmsNormParams p;
  p.input = x.mutable_data_ptr();
  p.residual = res.mutable_data_ptr();
  p.weight = w.const_data_ptr();
  p.rows = d == 0 ? 0 : x.numel() / d;
  p.cols = d;
  p.eps = a.eps;
  p.dtype = to_kernel_dtype(x.scalar_type());
  check_launch("fused_add_rms_norm_",
               cuda_kernels::launch_fused_add_rms_norm(p, at::cuda::getCurrentCUDAStream()));
  if (!x.is_same(a.input)) a.input.copy_(x);
  if (!res.is_same(a.residual)) a.residual.copy_(res);
}

}  // namespace customop::ops::detail
