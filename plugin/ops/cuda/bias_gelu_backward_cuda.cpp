// CUDA glue of customop::bias_gelu_backward: contiguous inputs, the band sums' scratch,
// launch of cuda_kernels::launch_bias_gelu_bwd on the current stream of input's device, and
// grad_bias as the bands' sum (one ATen reduction over [bands, D], in the accumulate type).

#include "cuda/cuda_glue.h"
#include "cuda_kernels/bias_gelu_backward_params.h"
#include "detail/bias_gelu.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void bias_gelu_backward_cuda(const BiasGeluBackwardArgs& a, const BiasGeluBackwardResult& out) {
  const c10::cuda::CUDAGuard guard(a.input.device());
  const at::Tensor g = a.grad.contiguous();
  const at::Tensor x = a.input.contiguous();
  const at::Tensor b = a.bias.contiguous();
  const at::Tensor& grad_input = std::get<0>(out);
  const at::Tensor& grad_bias = std::get<1>(out);
  const int64_t d = x.size(-1);
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  if (d == 0) return;
  if (rows == 0) {
    grad_bias.zero_();  // no rows: the sum over them is 0
    return;
  }
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor partial =
      at::empty({cuda_kernels::column_sum_bands(rows), d}, x.options().dtype(acc));
  cuda_kernels::BiasGeluBackwardParams p;
  p.grad = g.const_data_ptr();
  p.input = x.const_data_ptr();
  p.bias = b.const_data_ptr();
  p.grad_input = grad_input.mutable_data_ptr();
  p.partial = partial.mutable_data_ptr();
  p.n_rows = rows;
  p.cols = d;
  p.approximate = a.approximate == "tanh" ? 1 : 0;
  p.dtype = to_kernel_dtype(x.scalar_type());
  check_launch("bias_gelu_backward",
               cuda_kernels::launch_bias_gelu_bwd(p, at::cuda::getCurrentCUDAStream()));
  grad_bias.copy_(partial.sum(0));
}

}  // namespace customop::ops::detail
