// max_along backward: g scattered to the argmax of each slice, zeros elsewhere, in one write.

#include "cuda_kernels/max_along_backward_params.h"

namespace customop::cuda_kernels {
namespace {

using namespace detail;

template <typename T>
__global__ void max_along_bwd_kernel(const T* __restrict__ grad,
                                     const std::int64_t* __restrict__ indices,
                                     T* __restrict__ grad_input, std::int64_t numel,
                                     std::int64_t size, std::int64_t inner) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < numel;
       e += stride) {
    const std::int64_t i = e % inner;
    const std::int64_t s = (e / inner) % size;
    const std::int64_t slice = (e / (inner * size)) * inner + i;
    grad_input[e] = indices[slice] == s ? grad[slice] : from_acc<T>(acc_t<T>(0));
  }
}

template <typename T>
cudaError_t launch_typed(const MaxAlongBackwardParams& p, cudaStream_t stream) {
  const std::int64_t numel = p.outer * p.size * p.inner;
  max_along_bwd_kernel<T>
      <<<static_cast<unsigned>(elementwise_blocks(numel)), kElementwiseThreads, 0, stream>>>(
          static_cast<const T*>(p.grad), p.indices, static_cast<T*>(p.grad_input), numel, p.size,
          p.inner);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_max_along_bwd(const MaxAlongBackwardParams& p, cudaStream_t stream) {
  if (p.outer < 0 || p.size < 0 || p.inner < 0) return cudaErrorInvalidValue;
  if (p.outer == 0 || p.size == 0 || p.inner == 0) return cudaSuccess;
  if (p.grad == nullptr || p.indices == nullptr || p.grad_input == nullptr)
    return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
