// Fused bias + GELU forward: grid-stride elementwise kernel; the bias column of element i is
// i % D (input is contiguous [N, D]).

#include "cuda_kernels/bias_gelu_params.h"

namespace customop::cuda_kernels {
namespace {

using namespace detail;

/// GELU with the constants and operation order of ATen's CUDA GeluKernel; the exact form gives
/// the limit 0 at x = -inf (as the CPU kernels), where that order gives -inf * 0 = NaN.
template <bool kTanh, typename A>
__device__ __forceinline__ A gelu(A x) {
  if constexpr (kTanh) {
    constexpr A kBeta = A(0.79788456080286535587989211986876);  // sqrt(2 / pi)
    constexpr A kKappa = A(0.044715);
    const A x_cube = x * x * x;
    const A inner = kBeta * (x + kKappa * x_cube);
    return A(0.5) * x * (A(1) + tanh_acc(inner));
  } else {
    constexpr A kAlpha = A(0.70710678118654752440084436210485);  // 1 / sqrt(2)
    const A y = x * A(0.5) * (A(1) + erf_acc(x * kAlpha));
    return isinf(x) && x < A(0) ? A(0) : y;
  }
}

/// VEC elements per access; VEC divides cols and every pointer is VEC * sizeof(T) aligned, so
/// a vector never straddles two rows and its bias slice is contiguous and aligned.
template <typename T, int VEC, bool kTanh>
__global__ void bias_gelu_fwd_kernel(const T* input, const T* __restrict__ bias, T* output,
                                     std::int64_t nvec, std::int64_t cols) {
  using A = acc_t<T>;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t v = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < nvec;
       v += stride) {
    const std::int64_t i = v * VEC;
    A xv[VEC];
    A bv[VEC];
    load_vec<VEC>(input + i, xv);
    load_vec<VEC>(bias + i % cols, bv);
#pragma unroll
    for (int j = 0; j < VEC; ++j) xv[j] = gelu<kTanh>(round_to<T>(xv[j] + bv[j]));
    store_vec<VEC>(output + i, xv);
  }
}

template <typename T, int VEC>
void launch_shape(const BiasGeluParams& p, std::int64_t numel, cudaStream_t stream) {
  const auto* x = static_cast<const T*>(p.input);
  const auto* b = static_cast<const T*>(p.bias);
  auto* y = static_cast<T*>(p.output);
  const std::int64_t nvec = numel / VEC;
  const dim3 grid(static_cast<unsigned>(elementwise_blocks(nvec)));
  const dim3 block(kElementwiseThreads);
  if (p.approximate == 1) {
    bias_gelu_fwd_kernel<T, VEC, true><<<grid, block, 0, stream>>>(x, b, y, nvec, p.cols);
  } else {
    bias_gelu_fwd_kernel<T, VEC, false><<<grid, block, 0, stream>>>(x, b, y, nvec, p.cols);
  }
}

template <typename T>
cudaError_t launch_typed(const BiasGeluParams& p, cudaStream_t stream) {
  constexpr int kV = kVec16<T>;
  const std::int64_t numel = p.n_rows * p.cols;
  const bool vec = p.cols % kV == 0 && is_aligned(p.input, 16) && is_aligned(p.bias, 16) &&
                   is_aligned(p.output, 16);
  if (vec) {
    launch_shape<T, kV>(p, numel, stream);
  } else {
    launch_shape<T, 1>(p, numel, stream);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_bias_gelu_fwd(const BiasGeluParams& p, cudaStream_t stream) {
  if (p.n_rows < 0 || p.cols < 0 || (p.approximate != 0 && p.approximate != 1))
    return cudaErrorInvalidValue;
  if (p.n_rows == 0 || p.cols == 0) return cudaSuccess;
  if (p.input == nullptr || p.bias == nullptr || p.output == nullptr) return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
