#pragma once
// The torch-free CUDA kernel of downstream::smooth_abs (smooth_abs_cuda.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace downstream {

/// Launch parameters of the forward kernel.
template <class T>
struct SmoothAbsParams {
  const T* x;     // input, n contiguous elements, device memory
  T* y;           // output, n contiguous elements, device memory
  int64_t n;      // element count, >= 0
  T eps_squared;  // eps^2, > 0
};

/// y[i] = sqrt(x[i]^2 + eps^2) on `stream`; returns the launch's error (cudaSuccess when n is 0).
template <class T>
cudaError_t launch_smooth_abs_fwd(const SmoothAbsParams<T>& params, cudaStream_t stream);

}  // namespace downstream
