// CUDA glue of customop::rms_norm: checks, contiguous inputs, output allocation, launch of
// cuda_kernels::launch_rms_norm_fwd on the current stream of input's device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/rms_norm_params.h"
#include "detail/rms_norm.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void rms_norm_cuda(const RmsNormArgs& a, const at::Tensor& y) {
  const c10::cuda::CUDAGuard guard(a.input.device());
  const at::Tensor x = a.input.contiguous();
  const at::Tensor w = a.weight.contiguous();
  const int64_t d = x.size(-1);
  cuda_kernels::RmsNormParams p;
  p.input = x.const_data_ptr();
  p.weight = w.const_data_ptr();
  p.output = y.mutable_data_ptr();
  p.rows = d == 0 ? 0 : x.numel() / d;
  p.cols = d;
  p.eps = a.eps;
  p.dtype = to_kernel_dtype(x.scalar_type());
  check_launch("rms_norm", cuda_kernels::launch_rms_norm_fwd(p, at::cuda::getCurrentCUDAStream()));
}

}  // namespace customop::ops::detail
