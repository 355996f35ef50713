#pragma once
// The kernels of the fused bias + leaky ReLU (StyleGAN2's fused_leaky_relu, Karras et al.
// 2020): torch-free, shared by the op's two registrations (fused_leaky_relu_customop.cpp and,
// for comparison, fused_leaky_relu_by_hand.cpp) through tensor_kernels.h.
//
// Tensors are contiguous and viewed as [outer, channels, inner]: x of shape [N, C, *] has
// outer = N, channels = C, inner = the product of the trailing dims; the bias is [C].

#include <cstdint>

#ifdef FLRELU_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flrelu {

/// out = scale * leaky_relu(x + bias, negative_slope), bias broadcast over dim 1.
template <class T>
struct ForwardParams {
  const T* x;
  const T* bias;
  T* out;
  int64_t outer, channels, inner;
  T negative_slope, scale;
};

/// grad_x = grad * scale * (out > 0 ? 1 : negative_slope), the mask read off the output as in
/// StyleGAN2 (out > 0 exactly where x + bias > 0, for scale > 0 and negative_slope >= 0);
/// grad_bias[c] = sum of grad_x over outer and inner.
template <class T>
struct BackwardParams {
  const T* grad;
  const T* out;
  T* grad_x;
  T* grad_bias;
  int64_t outer, channels, inner;
  T negative_slope, scale;
};

template <class T>
void forward_cpu(const ForwardParams<T>& p);
template <class T>
void backward_cpu(const BackwardParams<T>& p);

#ifdef FLRELU_WITH_CUDA
/// Launch on `stream`; the launch's error (cudaGetLastError) is returned, not thrown.
template <class T>
cudaError_t forward_cuda(const ForwardParams<T>& p, cudaStream_t stream);
template <class T>
cudaError_t backward_cuda(const BackwardParams<T>& p, cudaStream_t stream);
#endif

}  // namespace flrelu
