// CUDA path of customop::weighted_sum_backward: out_k = w_k * g through ATen's CUDA mul, one
// launch per weight on the current stream (K reads of g; a fused kernel is the GPU issue's).

#include "detail/weighted_sum.h"

#include <ATen/ops/mul.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/cuda/CUDAGuard.h>

#include <vector>

namespace customop::ops::detail {

std::vector<at::Tensor> weighted_sum_backward_cuda(const WeightedSumBackwardArgs& a) {
  const c10::cuda::CUDAGuard guard(a.grad.device());
  std::vector<at::Tensor> out = weighted_sum_backward_outputs(a);
  for (size_t k = 0; k < a.weights.size(); ++k) {
    at::mul_out(out[k], a.grad, at::scalar_tensor(a.weights[k], at::kDouble));
  }
  return out;
}

}  // namespace customop::ops::detail
