// CUDA glue of customop::rms_norm_backward: contiguous inputs, the per-row r and band sums'
// scratch, launch of cuda_kernels::launch_rms_norm_bwd on the current stream of input's device,
// and grad_weight as the bands' sum (one ATen reduction over [bands, D], in the accumulate type).

#include "cuda/cuda_glue.h"
#include "cuda_kernels/rms_norm_backward_params.h"
#include "detail/rms_norm.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <c10/cuda/CUDAGuard.h>

namespace customop::ops::detail {

void rms_norm_backward_cuda(const RmsNormBackwardArgs& a, const RmsNormBackwardResult& out) {
  const c10::cuda::CUDAGuard guard(a.input.device());
  const at::Tensor g = a.grad.contiguous();
  const at::Tensor x = a.input.contiguous();
  const at::Tensor w = a.weight.contiguous();
  const at::Tensor& grad_input = std::get<0>(out);
  const at::Tensor& grad_weight = std::get<1>(out);
  const int64_t d = x.size(-1);
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  if (d == 0) return;
  if (rows == 0) {
    grad_weight.zero_();  // no rows: the sum over them is 0
    return;
  }
  const auto acc = x.options().dtype(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  const at::Tensor inv_rms = at::empty({rows}, acc);
  const at::Tensor partial = at::empty({cuda_kernels::column_sum_bands(rows), d}, acc);
  cuda_kernels::RmsNormBackwardParams p;
  p.grad = g.const_data_ptr();
  p.input = x.const_data_ptr();
  p.weight = w.const_data_ptr();
  p.grad_input = grad_input.mutable_data_ptr();
  p.inv_rms = inv_rms.mutable_data_ptr();
  p.partial = partial.mutable_data_ptr();
  p.n_rows = rows;
  p.cols = d;
  p.eps = a.eps;
  p.dtype = to_kernel_dtype(x.scalar_type());
  check_launch("rms_norm_backward",
               cuda_kernels::launch_rms_norm_bwd(p, at::cuda::getCurrentCUDAStream()));
  grad_weight.copy_(partial.sum(0));
}

}  // namespace customop::ops::detail
