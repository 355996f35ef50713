// CUDA glue of customop::masked_softmax_backward: contiguous inputs, launch of
// cuda_kernels::launch_masked_softmax_bwd on the current stream of output's device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/masked_softmax_backward_params.h"
#include "detail/checks.h"
#include "detail/masked_softmax.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void masked_softmax_backward_cuda(const MaskedSoftmaxBackwardArgs& a, const at::Tensor& out) {
  // Checked by op.shape.
  const int64_t dim = wrap_dim("masked_softmax_backward", a.dim, a.output.dim());
  const c10::cuda::CUDAGuard guard(a.output.device());
  const at::Tensor g = a.grad.contiguous();
  const at::Tensor y = a.output.contiguous();
  const auto s = split_at_dim(y.sizes(), dim);
  cuda_kernels::MaskedSoftmaxBackwardParams p;
  p.grad = g.const_data_ptr();
  p.output = y.const_data_ptr();
  p.grad_input = out.mutable_data_ptr();
  p.outer = s.outer;
  p.size = s.size;
  p.inner = s.inner;
  p.dtype = to_kernel_dtype(y.scalar_type());
  check_launch("masked_softmax_backward",
               cuda_kernels::launch_masked_softmax_bwd(p, at::cuda::getCurrentCUDAStream()));
}

}  // namespace customop::ops::detail
