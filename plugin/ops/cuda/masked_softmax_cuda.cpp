// CUDA glue of customop::masked_softmax: checks, contiguous input, the mask broadcast to
// input's shape and made contiguous, output allocation, launch of
// cuda_kernels::launch_masked_softmax_fwd on the current stream of input's device.

#include "cuda/cuda_glue.h"
#include "cuda_kernels/masked_softmax_params.h"
#include "detail/checks.h"
#include "detail/masked_softmax.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void masked_softmax_cuda(const MaskedSoftmaxArgs& a, const at::Tensor& y) {
  const int64_t dim = wrap_dim("masked_softmax", a.dim, a.input.dim());  // checked by op.shape
  const c10::cuda::CUDAGuard guard(a.input.device());
  const at::Tensor x = a.input.contiguous();
  const at::Tensor mask = a.mask ? a.mask->expand(x.sizes()).contiguous() : at::Tensor();
  const auto s = split_at_dim(x.sizes(), dim);
  cuda_kernels::MaskedSoftmaxParams p;
  p.input = x.const_data_ptr();
  p.mask = mask.defined() ? static_cast<const std::uint8_t*>(mask.const_data_ptr()) : nullptr;
  p.output = y.mutable_data_ptr();
  p.outer = s.outer;
  p.size = s.size;
  p.inner = s.inner;
  p.dtype = to_kernel_dtype(x.scalar_type());
  check_launch("masked_softmax",
               cuda_kernels::launch_masked_softmax_fwd(p, at::cuda::getCurrentCUDAStream()));
}

}  // namespace customop::ops::detail
