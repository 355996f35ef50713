// Fused bias + GELU backward: grad_input = g * gelu'(x + b) and the column sums of grad_input
// by bands of rows (the caller adds the bands: grad_bias).

#include "cuda_kernels/bias_gelu_backward_params.h"

namespace customop::cuda_kernels {

namespace {

using namespace detail;

/// gelu'(s) (formulas: plugin/ops/bias_gelu_backward.cpp); the exact form's s phi(s) with s
/// capped at +-40, where phi is 0 already (s = +-inf: the limits 1 and 0).
template <bool kTanh, typename A>
__device__ __forceinline__ A gelu_derivative(A s) {
  if constexpr (kTanh) {
    constexpr A kBeta = A(0.79788456080286535587989211986876);  // sqrt(2 / pi)
    constexpr A kKappa = A(0.044715);
    const A s_sq = s * s;
    const A t = tanh_acc(kBeta * (s + kKappa * s_sq * s));
    return A(0.5) * (A(1) + t) +
           A(0.5) * s * (A(1) - t * t) * kBeta * (A(1) + A(3) * kKappa * s_sq);
  } else {
    constexpr A kAlpha = A(0.70710678118654752440084436210485);       // 1 / sqrt(2)
    constexpr A kInvSqrt2Pi = A(0.39894228040143267793994605993438);  // 1 / sqrt(2 pi)
    const A capped = s < A(-40) ? A(-40) : (s > A(40) ? A(40) : s);
    return A(0.5) * (A(1) + erf_acc(s * kAlpha)) + capped * exp_acc(A(-0.5) * s * s) * kInvSqrt2Pi;
  }
}

/// Block (kBandCols, kBandRows), grid (ceil(cols / kBandCols), bands): the column sums
/// layout (common.h), grad_input written on the way.
template <typename T, bool kTanh>
__global__ void bias_gelu_bwd_kernel(const T* grad, const T* input, const T* __restrict__ bias,
                                     T* grad_input, acc_t<T>* partial, std::int64_t rows,
                                     std::int64_t cols, std::int64_t rows_per_band) {
  using A = acc_t<T>;
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kBandCols + threadIdx.x;
  const BandRows band = band_rows(rows, rows_per_band);
  A acc = A(0);
  if (col < cols) {
    const A b = load_as_acc(bias + col);
    for (std::int64_t r = band.first + threadIdx.y; r < band.end; r += kBandRows) {
      const std::int64_t i = r * cols + col;
      const A s = round_to<T>(load_as_acc(input + i) + b);
      const A v = load_as_acc(grad + i) * gelu_derivative<kTanh>(s);
      store_from_acc(grad_input + i, v);
      acc += v;
    }
  }
  store_band_sums(acc, partial, col, cols);
}

template <typename T>
cudaError_t launch_typed(const BiasGeluBackwardParams& p, cudaStream_t stream) {
  using A = acc_t<T>;
  const std::int64_t bands = column_sum_bands(p.n_rows);
  const std::int64_t rows_per_band = ceil_div(p.n_rows, bands);
  const dim3 grid(static_cast<unsigned>(ceil_div(p.cols, kBandCols)), static_cast<unsigned>(bands));
  const dim3 block(kBandCols, kBandRows);
  const auto* g = static_cast<const T*>(p.grad);
  const auto* x = static_cast<const T*>(p.input);
  const auto* b = static_cast<const T*>(p.bias);
  auto* gi = static_cast<T*>(p.grad_input);
  auto* part = static_cast<A*>(p.partial);
  if (p.approximate == 1) {
    bias_gelu_bwd_kernel<T, true>
        <<<grid, block, 0, stream>>>(g, x, b, gi, part, p.n_rows, p.cols, rows_per_band);
  } else {
    bias_gelu_bwd_kernel<T, false>
        <<<grid, block, 0, stream>>>(g, x, b, gi, part, p.n_rows, p.cols, rows_per_band);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_bias_gelu_bwd(const BiasGeluBackwardParams& p, cudaStream_t stream) {
  if (p.n_rows < 0 || p.cols < 0 || (p.approximate != 0 && p.approximate != 1))
    return cudaErrorInvalidValue;
  if (p.n_rows == 0 || p.cols == 0) return cudaSuccess;
  if (p.grad == nullptr || p.input == nullptr || p.bias == nullptr || p.grad_input == nullptr ||
      p.partial == nullptr)
    return cudaErrorInvalidValue;
  // gridDim.x is at most 2^31 - 1: cols up to 6.8e10, beyond any tensor here.
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
