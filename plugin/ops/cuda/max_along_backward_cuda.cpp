// CUDA glue of customop::max_along_backward: contiguous inputs, an asynchronous device-side
// check that every index lies in [0, size), launch of cuda_kernels::launch_max_along_bwd on
// the current stream of grad's device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/max_along_backward_params.h"
#include "detail/checks.h"
#include "detail/max_along.h"

#include <ATen/TensorOperators.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/_assert_async.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void max_along_backward_cuda(const MaxAlongBackwardArgs& a, const at::Tensor& out) {
  // Checked by op.shape.
  const int64_t dim = wrap_dim("max_along_backward", a.dim, a.grad.dim());
  const c10::cuda::CUDAGuard guard(a.grad.device());
  const at::Tensor g = a.grad.contiguous();
  const at::Tensor idx = a.indices.contiguous();
  // NB: no host sync: a bad index fails a device assertion that the next synchronising call
  // raises (the kernel leaves that slice zero).
  if (idx.numel() > 0) {
    at::_assert_async((idx >= 0).logical_and_(idx < a.size.expect_int()).all(),
                      "max_along_backward: indices must be in [0, size)");
  }
  const auto s = split_at_dim(out.sizes(), dim);
  cuda_kernels::MaxAlongBackwardParams p;
  p.grad = g.const_data_ptr();
  p.indices = static_cast<const std::int64_t*>(idx.const_data_ptr());
  p.grad_input = out.mutable_data_ptr();
  p.outer = s.outer;
  p.size = s.size;
  p.inner = s.inner;
  p.dtype = to_kernel_dtype(g.scalar_type());
  check_launch("max_along_backward",
               cuda_kernels::launch_max_along_bwd(p, at::cuda::getCurrentCUDAStream()));
}

}  // namespace customop::ops::detail
