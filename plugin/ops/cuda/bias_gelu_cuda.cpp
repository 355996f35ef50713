// CUDA glue of customop::bias_gelu: checks, contiguous inputs, output allocation, launch of
// cuda_kernels::launch_bias_gelu_fwd on the current stream of input's device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/bias_gelu_params.h"
#include "detail/bias_gelu.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void bias_gelu_cuda(const BiasGeluArgs& a, const at::Tensor& y) {
  const c10::cuda::CUDAGuard guard(a.input.device());
  const at::Tensor x = a.input.contiguous();
  const at::Tensor b = a.bias.contiguous();
  const int64_t d = x.size(-1);
  cuda_kernels::BiasGeluParams p;
  p.input = x.const_data_ptr();
  p.bias = b.const_data_ptr();
  p.output = y.mutable_data_ptr();
  p.n_rows = d == 0 ? 0 : x.numel() / d;
  p.cols = d;
  p.approximate = a.approximate == "tanh" ? 1 : 0;
  p.dtype = to_kernel_dtype(x.scalar_type());
  check_launch("bias_gelu",
               cuda_kernels::launch_bias_gelu_fwd(p, at::cuda::getCurrentCUDAStream()));
}

}  // namespace customop::ops::detail
