// CUDA glue of customop::max_along: checks, contiguous input, output allocation, launch of
// cuda_kernels::launch_max_along_fwd on the current stream of input's device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/max_along_params.h"
#include "detail/checks.h"
#include "detail/max_along.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void max_along_cuda(const MaxAlongArgs& a, const MaxAlongResult& out) {
  const int64_t dim = wrap_dim("max_along", a.dim, a.input.dim());  // checked by op.shape
  const c10::cuda::CUDAGuard guard(a.input.device());
  const at::Tensor x = a.input.contiguous();
  const auto& [values, indices] = out;
  const auto s = split_at_dim(x.sizes(), dim);
  cuda_kernels::MaxAlongParams p;
  p.input = x.const_data_ptr();
  p.values = values.mutable_data_ptr();
  p.indices = indices.mutable_data_ptr<int64_t>();
  p.outer = s.outer;
  p.size = s.size;
  p.inner = s.inner;
  p.dtype = to_kernel_dtype(x.scalar_type());
  check_launch("max_along",
               cuda_kernels::launch_max_along_fwd(p, at::cuda::getCurrentCUDAStream()));
}

}  // namespace customop::ops::detail
