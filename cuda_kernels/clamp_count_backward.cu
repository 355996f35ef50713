// clamp_count backward: grad where the input lies within the bounds, 0 elsewhere.

#include "cuda_kernels/clamp_count_backward_params.h"

namespace customop::cuda_kernels {
namespace {

using namespace detail;

/// The bounds rounded to T (scalar_to), as the forward's and ATen's comparisons round them.
template <typename T>
__global__ void clamp_count_bwd_kernel(const T* grad, const T* input, T* grad_input,
                                       std::int64_t numel, double min, double max) {
  using A = acc_t<T>;
  const A lo = to_acc(scalar_to<T>(min));
  const A hi = to_acc(scalar_to<T>(max));
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += stride) {
    const A x = load_as_acc(input + i);
    store_from_acc(grad_input + i, x >= lo && x <= hi ? load_as_acc(grad + i) : A(0));
  }
}

template <typename T>
cudaError_t launch_typed(const ClampCountBackwardParams& p, cudaStream_t stream) {
  clamp_count_bwd_kernel<T>
      <<<static_cast<unsigned>(elementwise_blocks(p.numel)), kElementwiseThreads, 0, stream>>>(
          static_cast<const T*>(p.grad), static_cast<const T*>(p.input),
          static_cast<T*>(p.grad_input), p.numel, p.min, p.max);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_clamp_count_bwd(const ClampCountBackwardParams& p, cudaStream_t stream) {
  if (p.numel < 0 || !(p.min <= p.max)) return cudaErrorInvalidValue;
  if (p.numel == 0) return cudaSuccess;
  if (p.grad == nullptr || p.input == nullptr || p.grad_input == nullptr)
    return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
