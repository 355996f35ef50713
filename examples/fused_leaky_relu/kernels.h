#pragma once
// The kernels of the fused bias + leaky ReLU (StyleGAN2's fused_leaky_relu, Karras et al.
// 2020): torch-free, shared by the op's two registrations (fused_leaky_relu_customop.cpp and,
// for comparison, fused_leaky_relu_by_hand.cpp) through tensor_kernels.h.
//
// Tensors are contiguous and viewed as [outer, channels, inner]: x of shape [N, C, *] has
// outer = N, channels = C, inner = the product of the trailing dims; the bias is [C].
//
// Element types: float64, float32, and 16-bit types (float16, bfloat16) that convert to and from
// float. Each element is computed in acc_t<T> and rounded once on store; grad_bias is summed in
// acc_t<T> over all of outer and inner and rounded once at the end. The CPU kernels are
// instantiated for c10::Half/c10::BFloat16 (kernels_cpu_16bit.cpp), the CUDA ones for
// __half/__nv_bfloat16 (the same layout; tensor_kernels.cpp casts the pointers).

#include <cstdint>
#include <type_traits>

#ifdef FLRELU_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flrelu {

/// The type a kernel computes and accumulates in: float for 16-bit element types (as
/// at::opmath_type), the element type itself for float and double.
template <class T>
using acc_t = std::conditional_t<(sizeof(T) < sizeof(float)), float, T>;

/// out = scale * leaky_relu(x + bias, negative_slope), bias broadcast over dim 1.
template <class T>
struct ForwardParams {
  const T* x;
  const T* bias;
  T* out;
  int64_t outer, channels, inner;
  acc_t<T> negative_slope, scale;
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
  acc_t<T> negative_slope, scale;
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
