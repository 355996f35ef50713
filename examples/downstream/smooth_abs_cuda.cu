#include "smooth_abs_params.h"

namespace downstream {
namespace {

template <class T>
__global__ void smooth_abs_fwd_kernel(SmoothAbsParams<T> p) {
  const int64_t stride = int64_t{blockDim.x} * gridDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < p.n; i += stride) {
    const T v = p.x[i];
    p.y[i] = sqrt(v * v + p.eps_squared);
  }
}

}  // namespace

template <class T>
cudaError_t launch_smooth_abs_fwd(const SmoothAbsParams<T>& params, cudaStream_t stream) {
  if (params.n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (params.n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
  smooth_abs_fwd_kernel<T><<<grid, kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

template cudaError_t launch_smooth_abs_fwd<float>(const SmoothAbsParams<float>&, cudaStream_t);
template cudaError_t launch_smooth_abs_fwd<double>(const SmoothAbsParams<double>&, cudaStream_t);

}  // namespace downstream
