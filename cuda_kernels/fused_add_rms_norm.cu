// Fused residual add + RMSNorm, in place: one warp (D <= 1024) or one block per row, the sum
// of squares reduced with warp shuffles. Pass 1 writes the rounded sum into residual and
// reduces its squares as stored (what the caller's residual then holds); pass 2 rereads the
// (L1/L2-resident) row to write the normalized input.

#include "cuda_kernels/fused_add_rms_norm_params.h"

namespace customop::cuda_kernels {
namespace {

using namespace detail;

template <typename T, int VEC, bool kBlockPerRow>
__global__ void __launch_bounds__(kMaxBlockThreads, kRowMinBlocksPerSm)
    fused_add_rms_norm_kernel(T* __restrict__ input, T* __restrict__ residual,
                              const T* __restrict__ weight, std::int64_t rows, std::int64_t cols,
                              acc_t<T> eps) {
  using A = acc_t<T>;
  const auto m = RowMapping<kBlockPerRow>::make();
  const std::int64_t nvec = cols / VEC;
  for (std::int64_t row = m.first_row; row < rows; row += m.row_stride) {
    T* x = input + row * cols;
    T* r = residual + row * cols;
    A sum_sq = 0;
    for (std::int64_t v = m.tid; v < nvec; v += m.nthreads) {
      A xv[VEC];
      A rv[VEC];
      load_vec<VEC>(x + v * VEC, xv);
      load_vec<VEC>(r + v * VEC, rv);
#pragma unroll
      for (int j = 0; j < VEC; ++j) rv[j] += xv[j];
      store_vec<VEC>(r + v * VEC, rv);
      load_vec<VEC>(r + v * VEC, rv);  // the rounded sum, as stored
#pragma unroll
      for (int j = 0; j < VEC; ++j) sum_sq += rv[j] * rv[j];
    }
    sum_sq = row_reduce_sum<kBlockPerRow>(sum_sq);
    const A inv_rms = rsqrt_acc(sum_sq / static_cast<A>(cols) + eps);
    // NB: each thread rereads only the vectors it wrote in pass 1: no barrier needed.
    for (std::int64_t v = m.tid; v < nvec; v += m.nthreads) {
      A sv[VEC];
      A wv[VEC];
      load_vec<VEC>(r + v * VEC, sv);
      load_vec<VEC>(weight + v * VEC, wv);
#pragma unroll
      for (int j = 0; j < VEC; ++j) sv[j] = sv[j] * inv_rms * wv[j];
      store_vec<VEC>(x + v * VEC, sv);
    }
  }
}

template <typename T, int VEC>
void launch_shape(const FusedAddRmsNormParams& p, const RowLaunch& l, cudaStream_t stream) {
  auto* x = static_cast<T*>(p.input);
  auto* r = static_cast<T*>(p.residual);
  const auto* w = static_cast<const T*>(p.weight);
  const auto eps = static_cast<acc_t<T>>(p.eps);
  const dim3 grid(static_cast<unsigned>(l.blocks));
  const dim3 block(static_cast<unsigned>(l.threads));
  if (l.block_per_row) {
    fused_add_rms_norm_kernel<T, VEC, true>
        <<<grid, block, 0, stream>>>(x, r, w, p.rows, p.cols, eps);
  } else {
    fused_add_rms_norm_kernel<T, VEC, false>
        <<<grid, block, 0, stream>>>(x, r, w, p.rows, p.cols, eps);
  }
}

template <typename T>
cudaError_t launch_typed(const FusedAddRmsNormParams& p, cudaStream_t stream) {
  constexpr int kV = kVec16<T>;
  const bool vec = p.cols % kV == 0 && is_aligned(p.input, 16) && is_aligned(p.residual, 16) &&
                   is_aligned(p.weight, 16);
  const RowLaunch l = row_launch(p.rows, p.cols, vec ? kV : 1);
  if (vec) {
    launch_shape<T, kV>(p, l, stream);
  } else {
    launch_shape<T, 1>(p, l, stream);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fused_add_rms_norm(const FusedAddRmsNormParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols < 0) return cudaErrorInvalidValue;
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  if (p.input == nullptr || p.residual == nullptr || p.weight == nullptr)
    return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
