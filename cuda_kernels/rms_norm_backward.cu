// RMSNorm backward: a block per row for grad_input (two block reductions), then the column
// sums of g x r for grad_weight by bands of rows (the caller adds the bands).

#include "cuda_kernels/rms_norm_backward_params.h"

namespace customop::cuda_kernels {

namespace {

using namespace detail;

constexpr int kRowThreads = 256;  // threads per row block

template <typename T>
__global__ void rms_norm_bwd_rows_kernel(const T* grad, const T* input,
                                         const T* __restrict__ weight, T* grad_input,
                                         acc_t<T>* inv_rms, std::int64_t rows, std::int64_t cols,
                                         acc_t<T> eps) {
  using A = acc_t<T>;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* g = grad + row * cols;
    const T* x = input + row * cols;
    A ss = 0, dot = 0;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const A xv = load_as_acc(x + j);
      ss += xv * xv;
      dot += load_as_acc(g + j) * load_as_acc(weight + j) * xv;
    }
    ss = block_reduce_sum(ss);
    dot = block_reduce_sum(dot);
    const A r = rsqrt_acc(ss / static_cast<A>(cols) + eps);
    const A c = r * r * r * dot / static_cast<A>(cols);
    T* gi = grad_input + row * cols;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const A v = r * load_as_acc(g + j) * load_as_acc(weight + j) - c * load_as_acc(x + j);
      store_from_acc(gi + j, v);
    }
    if (threadIdx.x == 0) inv_rms[row] = r;
  }
}

/// Block (kBandCols, kBandRows), grid (ceil(cols / kBandCols), bands): the column sums of
/// g x r (common.h's layout).
template <typename T>
__global__ void rms_norm_bwd_weight_kernel(const T* grad, const T* input, const acc_t<T>* inv_rms,
                                           acc_t<T>* partial, std::int64_t rows, std::int64_t cols,
                                           std::int64_t rows_per_band) {
  using A = acc_t<T>;
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kBandCols + threadIdx.x;
  const BandRows band = band_rows(rows, rows_per_band);
  A acc = A(0);
  if (col < cols) {
    for (std::int64_t r = band.first + threadIdx.y; r < band.end; r += kBandRows) {
      const std::int64_t i = r * cols + col;
      acc += load_as_acc(grad + i) * load_as_acc(input + i) * inv_rms[r];
    }
  }
  store_band_sums(acc, partial, col, cols);
}

template <typename T>
cudaError_t launch_typed(const RmsNormBackwardParams& p, cudaStream_t stream) {
  using A = acc_t<T>;
  const auto* g = static_cast<const T*>(p.grad);
  const auto* x = static_cast<const T*>(p.input);
  const auto* w = static_cast<const T*>(p.weight);
  auto* inv = static_cast<A*>(p.inv_rms);
  const std::int64_t row_blocks = p.n_rows < kMaxGridBlocks ? p.n_rows : kMaxGridBlocks;
  rms_norm_bwd_rows_kernel<T><<<static_cast<unsigned>(row_blocks), kRowThreads, 0, stream>>>(
      g, x, w, static_cast<T*>(p.grad_input), inv, p.n_rows, p.cols, static_cast<A>(p.eps));
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const std::int64_t bands = column_sum_bands(p.n_rows);
  const dim3 grid(static_cast<unsigned>(ceil_div(p.cols, kBandCols)), static_cast<unsigned>(bands));
  rms_norm_bwd_weight_kernel<T><<<grid, dim3(kBandCols, kBandRows), 0, stream>>>(
      g, x, inv, static_cast<A*>(p.partial), p.n_rows, p.cols, ceil_div(p.n_rows, bands));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rms_norm_bwd(const RmsNormBackwardParams& p, cudaStream_t stream) {
  if (p.n_rows < 0 || p.cols < 0 || !(p.eps >= 0)) return cudaErrorInvalidValue;
  if (p.n_rows == 0 || p.cols == 0) return cudaSuccess;
  if (p.grad == nullptr || p.input == nullptr || p.weight == nullptr || p.grad_input == nullptr ||
      p.inv_rms == nullptr || p.partial == nullptr)
    return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
