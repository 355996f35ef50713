// Masked softmax backward: grad_input = y (g - sum(g y)) per slice; one reduction, one write.

#include "cuda_kernels/masked_softmax_backward_params.h"

namespace customop::cuda_kernels {
namespace {

using namespace detail;

/// inner == 1: slices of `size` contiguous elements, a warp or a block each.
template <typename T, bool kBlockPerRow>
__global__ void __launch_bounds__(kMaxBlockThreads)
    masked_softmax_bwd_rows_kernel(const T* __restrict__ grad, const T* __restrict__ output,
                                   T* __restrict__ grad_input, std::int64_t rows,
                                   std::int64_t size) {
  using A = acc_t<T>;
  const auto m = RowMapping<kBlockPerRow>::make();
  for (std::int64_t row = m.first_row; row < rows; row += m.row_stride) {
    const T* g = grad + row * size;
    const T* y = output + row * size;
    A dot = 0;
    for (std::int64_t j = m.tid; j < size; j += m.nthreads)
      dot += load_as_acc(g + j) * load_as_acc(y + j);
    dot = row_reduce_sum<kBlockPerRow>(dot);
    T* gi = grad_input + row * size;
    for (std::int64_t j = m.tid; j < size; j += m.nthreads) {
      store_from_acc(gi + j, load_as_acc(y + j) * (load_as_acc(g + j) - dot));
    }
  }
}

/// inner > 1: a thread per slice (o, j), grid-stride; neighbouring threads read neighbouring j.
template <typename T>
__global__ void masked_softmax_bwd_strided_kernel(const T* __restrict__ grad,
                                                  const T* __restrict__ output,
                                                  T* __restrict__ grad_input, std::int64_t outer,
                                                  std::int64_t size, std::int64_t inner) {
  using A = acc_t<T>;
  const std::int64_t slices = outer * inner;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       k < slices; k += stride) {
    const std::int64_t base = (k / inner) * size * inner + k % inner;
    A dot = 0;
    for (std::int64_t s = 0; s < size; ++s) {
      dot += load_as_acc(grad + base + s * inner) * load_as_acc(output + base + s * inner);
    }
    for (std::int64_t s = 0; s < size; ++s) {
      const std::int64_t i = base + s * inner;
      store_from_acc(grad_input + i, load_as_acc(output + i) * (load_as_acc(grad + i) - dot));
    }
  }
}

template <typename T>
cudaError_t launch_typed(const MaskedSoftmaxBackwardParams& p, cudaStream_t stream) {
  const auto* g = static_cast<const T*>(p.grad);
  const auto* y = static_cast<const T*>(p.output);
  auto* gi = static_cast<T*>(p.grad_input);
  if (p.inner == 1) {
    const RowLaunch l = row_launch(p.outer, p.size, 1);
    if (l.block_per_row) {
      masked_softmax_bwd_rows_kernel<T, true>
          <<<static_cast<unsigned>(l.blocks), l.threads, 0, stream>>>(g, y, gi, p.outer, p.size);
    } else {
      masked_softmax_bwd_rows_kernel<T, false>
          <<<static_cast<unsigned>(l.blocks), l.threads, 0, stream>>>(g, y, gi, p.outer, p.size);
    }
  } else {
    masked_softmax_bwd_strided_kernel<T>
        <<<static_cast<unsigned>(elementwise_blocks(p.outer * p.inner)), kElementwiseThreads, 0,
           stream>>>(g, y, gi, p.outer, p.size, p.inner);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_masked_softmax_bwd(const MaskedSoftmaxBackwardParams& p, cudaStream_t stream) {
  if (p.outer < 0 || p.size < 0 || p.inner < 0) return cudaErrorInvalidValue;
  if (p.outer == 0 || p.size == 0 || p.inner == 0) return cudaSuccess;
  if (p.grad == nullptr || p.output == nullptr || p.grad_input == nullptr)
    return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
