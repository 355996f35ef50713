#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace flrelu {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

// Each element in acc_t<T> (float for __half/__nv_bfloat16), rounded to T once on store.
template <class T>
__global__ void forward_kernel(ForwardParams<T> p) {
  using A = acc_t<T>;
  const int64_t n = p.outer * p.channels * p.inner;
  const int64_t stride = int64_t{blockDim.x} * gridDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const A s = static_cast<A>(p.x[i]) + static_cast<A>(p.bias[(i / p.inner) % p.channels]);
    p.out[i] = static_cast<T>((s > A(0) ? s : s * p.negative_slope) * p.scale);
  }
}

template <class T>
__global__ void grad_x_kernel(BackwardParams<T> p) {
  using A = acc_t<T>;
  const int64_t n = p.outer * p.channels * p.inner;
  const int64_t stride = int64_t{blockDim.x} * gridDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const A slope = static_cast<A>(p.out[i]) > A(0) ? A(1) : p.negative_slope;
    p.grad_x[i] = static_cast<T>(static_cast<A>(p.grad[i]) * p.scale * slope);
  }
}

// One block per channel: a strided sum over its outer * inner entries, then a tree in shared
// memory, all in acc_t<T>. It sums the grad itself (grad * scale * slope, not the rounded
// grad_x), as the CPU kernel does.
template <class T>
__global__ void grad_bias_kernel(BackwardParams<T> p) {
  using A = acc_t<T>;
  __shared__ A partial[kThreads];
  const int64_t c = blockIdx.x;
  const int64_t per_channel = p.outer * p.inner;
  A sum = A(0);
  for (int64_t j = threadIdx.x; j < per_channel; j += blockDim.x) {
    const int64_t i = (j / p.inner * p.channels + c) * p.inner + j % p.inner;
    const A slope = static_cast<A>(p.out[i]) > A(0) ? A(1) : p.negative_slope;
    sum += static_cast<A>(p.grad[i]) * p.scale * slope;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) p.grad_bias[c] = static_cast<T>(partial[0]);
}

}  // namespace

template <class T>
cudaError_t forward_cuda(const ForwardParams<T>& p, cudaStream_t stream) {
  const int64_t n = p.outer * p.channels * p.inner;
  if (n == 0) return cudaSuccess;
  forward_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <class T>
cudaError_t backward_cuda(const BackwardParams<T>& p, cudaStream_t stream) {
  const int64_t n = p.outer * p.channels * p.inner;
  if (p.channels == 0) return cudaSuccess;
  if (n > 0) grad_x_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  // NB: channels <= 2^31 - 1 blocks in x; checked by the caller.
  grad_bias_kernel<T><<<static_cast<unsigned>(p.channels), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template cudaError_t forward_cuda<float>(const ForwardParams<float>&, cudaStream_t);
template cudaError_t forward_cuda<double>(const ForwardParams<double>&, cudaStream_t);
template cudaError_t backward_cuda<float>(const BackwardParams<float>&, cudaStream_t);
template cudaError_t backward_cuda<double>(const BackwardParams<double>&, cudaStream_t);
template cudaError_t forward_cuda<__half>(const ForwardParams<__half>&, cudaStream_t);
template cudaError_t forward_cuda<__nv_bfloat16>(const ForwardParams<__nv_bfloat16>&, cudaStream_t);
template cudaError_t backward_cuda<__half>(const BackwardParams<__half>&, cudaStream_t);
template cudaError_t backward_cuda<__nv_bfloat16>(const BackwardParams<__nv_bfloat16>&,
                                                  cudaStream_t);

}  // namespace flrelu
