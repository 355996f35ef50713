// RMSNorm forward: one warp (D <= 1024) or one block per row, sum of squares reduced with
// warp shuffles. When the row fits in the group's registers (cached_vectors), x is read once
// and kept there for the scale-and-store (a single pass over memory, as Inductor's persistent
// reductions); otherwise a second pass rereads the (L1/L2-resident) row.

#include "cuda_kernels/rms_norm_params.h"

namespace customop::cuda_kernels {
namespace {

using namespace detail;

/// VEC elements per load; VEC divides cols and the pointers are VEC * sizeof(T) aligned.
template <typename T, int VEC, bool kBlockPerRow>
__global__ void __launch_bounds__(kMaxBlockThreads, kRowMinBlocksPerSm)
    rms_norm_fwd_kernel(const T* __restrict__ input, const T* __restrict__ weight,
                        T* __restrict__ output, std::int64_t rows, std::int64_t cols,
                        acc_t<T> eps) {
  using A = acc_t<T>;
  const auto m = RowMapping<kBlockPerRow>::make();
  const std::int64_t nvec = cols / VEC;
  for (std::int64_t row = m.first_row; row < rows; row += m.row_stride) {
    const T* x = input + row * cols;
    T* y = output + row * cols;
    A sum_sq = 0;
    for (std::int64_t v = m.tid; v < nvec; v += m.nthreads) {
      A xv[VEC];
      load_vec<VEC>(x + v * VEC, xv);
#pragma unroll
      for (int j = 0; j < VEC; ++j) sum_sq += xv[j] * xv[j];
    }
    sum_sq = row_reduce_sum<kBlockPerRow>(sum_sq);
    // As ATen: rsqrt(mean(x^2) + eps), with eps in the accumulate type.
    const A inv_rms = rsqrt_acc(sum_sq / static_cast<A>(cols) + eps);
    for (std::int64_t v = m.tid; v < nvec; v += m.nthreads) {
      A xv[VEC];
      A wv[VEC];
      load_vec<VEC>(x + v * VEC, xv);
      load_vec<VEC>(weight + v * VEC, wv);
      // As ATen (rms_norm_composite and _fused_rms_norm): (x * inv_rms) * weight in the
      // accumulate type, rounded to T once.
#pragma unroll
      for (int j = 0; j < VEC; ++j) xv[j] = xv[j] * inv_rms * wv[j];
      store_vec<VEC>(y + v * VEC, xv);
    }
  }
}

/// The single-pass kernel: thread tid keeps vectors tid, tid + nthreads, ... (at most kVecs,
/// which cover the row) in registers between the reduction and the store. Sums in the same
/// order as rms_norm_fwd_kernel, so both give the same bits.
template <typename T, int VEC, int kVecs, bool kBlockPerRow>
__global__ void __launch_bounds__(kMaxBlockThreads, kRowMinBlocksPerSm)
    rms_norm_fwd_cached_kernel(const T* __restrict__ input, const T* __restrict__ weight,
                               T* __restrict__ output, std::int64_t rows, std::int64_t cols,
                               acc_t<T> eps) {
  using A = acc_t<T>;
  const auto m = RowMapping<kBlockPerRow>::make();
  const std::int64_t nvec = cols / VEC;
  for (std::int64_t row = m.first_row; row < rows; row += m.row_stride) {
    const T* x = input + row * cols;
    T* y = output + row * cols;
    A xv[kVecs][VEC];
    A sum_sq = 0;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const std::int64_t v = m.tid + static_cast<std::int64_t>(k) * m.nthreads;
      if (v < nvec) {
        load_vec<VEC>(x + v * VEC, xv[k]);
#pragma unroll
        for (int j = 0; j < VEC; ++j) sum_sq += xv[k][j] * xv[k][j];
      }
    }
    sum_sq = row_reduce_sum<kBlockPerRow>(sum_sq);
    const A inv_rms = rsqrt_acc(sum_sq / static_cast<A>(cols) + eps);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const std::int64_t v = m.tid + static_cast<std::int64_t>(k) * m.nthreads;
      if (v < nvec) {
        A wv[VEC];
        load_vec<VEC>(weight + v * VEC, wv);
#pragma unroll
        for (int j = 0; j < VEC; ++j) xv[k][j] = xv[k][j] * inv_rms * wv[j];
        store_vec<VEC>(y + v * VEC, xv[k]);
      }
    }
  }
}

template <typename T, int VEC>
void launch_shape(const RmsNormParams& p, const RowLaunch& l, cudaStream_t stream) {
  const auto* x = static_cast<const T*>(p.input);
  const auto* w = static_cast<const T*>(p.weight);
  auto* y = static_cast<T*>(p.output);
  const auto eps = static_cast<acc_t<T>>(p.eps);
  const dim3 grid(static_cast<unsigned>(l.blocks));
  const dim3 block(static_cast<unsigned>(l.threads));
  if constexpr (VEC > 1) {
    const int group = l.block_per_row ? l.threads : kWarpSize;
    const int cached = cached_vectors<acc_t<T>, VEC>(p.cols / VEC, group);
    if (cached > 0) {
      dispatch_cached<acc_t<T>, VEC>(cached, [&](auto k) {
        constexpr int kVecs = decltype(k)::value;
        if (l.block_per_row) {
          rms_norm_fwd_cached_kernel<T, VEC, kVecs, true>
              <<<grid, block, 0, stream>>>(x, w, y, p.rows, p.cols, eps);
        } else {
          rms_norm_fwd_cached_kernel<T, VEC, kVecs, false>
              <<<grid, block, 0, stream>>>(x, w, y, p.rows, p.cols, eps);
        }
      });
      return;
    }
  }
  if (l.block_per_row) {
    rms_norm_fwd_kernel<T, VEC, true><<<grid, block, 0, stream>>>(x, w, y, p.rows, p.cols, eps);
  } else {
    rms_norm_fwd_kernel<T, VEC, false><<<grid, block, 0, stream>>>(x, w, y, p.rows, p.cols, eps);
  }
}

template <typename T>
cudaError_t launch_typed(const RmsNormParams& p, cudaStream_t stream) {
  constexpr int kV = kVec16<T>;
  const bool vec = p.cols % kV == 0 && is_aligned(p.input, 16) && is_aligned(p.weight, 16) &&
                   is_aligned(p.output, 16);
  const RowLaunch l = row_launch(p.rows, p.cols, vec ? kV : 1);
  if (vec) {
    launch_shape<T, kV>(p, l, stream);
  } else {
    launch_shape<T, 1>(p, l, stream);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rms_norm_fwd(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols < 0) return cudaErrorInvalidValue;
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  if (p.input == nullptr || p.weight == nullptr || p.output == nullptr)
    return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
