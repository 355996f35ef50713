// Masked softmax forward: three passes over each slice (max of the kept elements; sum of
// exp(x - max); write), the later passes hitting L1/L2. Contiguous rows that fit in the row
// group's registers (cached_vectors) are read once and exponentiated once instead. Masked
// elements never reach exp or the division, so a fully masked slice (max = -inf, sum = 0)
// writes zeros and no NaN.

#include "cuda_kernels/masked_softmax_params.h"

namespace customop::cuda_kernels {
namespace {

using namespace detail;

/// VEC elements of the mask at row + offset (all kept when kHasMask is false; row is then
/// null and never offset).
template <bool kHasMask, int VEC>
__device__ __forceinline__ void load_keep(const std::uint8_t* row, std::int64_t offset,
                                          bool (&keep)[VEC]) {
  if constexpr (kHasMask) {
    load_mask_vec<VEC>(row + offset, keep);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) keep[j] = true;
  }
}

/// inner == 1: slices of `size` contiguous elements. VEC divides size; input and output are
/// VEC * sizeof(T) aligned and the mask VEC aligned.
template <typename T, int VEC, bool kBlockPerRow, bool kHasMask>
__global__ void __launch_bounds__(kMaxBlockThreads, kRowMinBlocksPerSm)
    masked_softmax_rows_kernel(const T* __restrict__ input, const std::uint8_t* __restrict__ mask,
                               T* __restrict__ output, std::int64_t rows, std::int64_t size) {
  using A = acc_t<T>;
  const auto m = RowMapping<kBlockPerRow>::make();
  const std::int64_t nvec = size / VEC;
  for (std::int64_t row = m.first_row; row < rows; row += m.row_stride) {
    const T* x = input + row * size;
    const std::uint8_t* mk = nullptr;
    if constexpr (kHasMask) mk = mask + row * size;
    T* y = output + row * size;

    A row_max = neg_inf(A{});
    for (std::int64_t v = m.tid; v < nvec; v += m.nthreads) {
      A xv[VEC];
      bool keep[VEC];
      load_vec<VEC>(x + v * VEC, xv);
      load_keep<kHasMask, VEC>(mk, v * VEC, keep);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        if (keep[j]) row_max = MaxOp{}(row_max, xv[j]);
      }
    }
    row_max = row_reduce_max<kBlockPerRow>(row_max);

    A row_sum = 0;
    for (std::int64_t v = m.tid; v < nvec; v += m.nthreads) {
      A xv[VEC];
      bool keep[VEC];
      load_vec<VEC>(x + v * VEC, xv);
      load_keep<kHasMask, VEC>(mk, v * VEC, keep);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        if (keep[j]) row_sum += exp_acc(xv[j] - row_max);
      }
    }
    row_sum = row_reduce_sum<kBlockPerRow>(row_sum);

    for (std::int64_t v = m.tid; v < nvec; v += m.nthreads) {
      A xv[VEC];
      bool keep[VEC];
      load_vec<VEC>(x + v * VEC, xv);
      load_keep<kHasMask, VEC>(mk, v * VEC, keep);
#pragma unroll
      for (int j = 0; j < VEC; ++j) xv[j] = keep[j] ? exp_acc(xv[j] - row_max) / row_sum : A(0);
      store_vec<VEC>(y + v * VEC, xv);
    }
  }
}

/// The single-pass form of masked_softmax_rows_kernel: thread tid keeps its vectors (tid,
/// tid + nthreads, ...; at most kVecs, which cover the row) and their mask in registers, and
/// exponentiates each kept element once. The same operations in the same order as the
/// three-pass kernel, so both give the same bits.
template <typename T, int VEC, int kVecs, bool kBlockPerRow, bool kHasMask>
__global__ void __launch_bounds__(kMaxBlockThreads, kRowMinBlocksPerSm)
    masked_softmax_rows_cached_kernel(const T* __restrict__ input,
                                      const std::uint8_t* __restrict__ mask, T* __restrict__ output,
                                      std::int64_t rows, std::int64_t size) {
  using A = acc_t<T>;
  const auto m = RowMapping<kBlockPerRow>::make();
  const std::int64_t nvec = size / VEC;
  for (std::int64_t row = m.first_row; row < rows; row += m.row_stride) {
    const T* x = input + row * size;
    const std::uint8_t* mk = nullptr;
    if constexpr (kHasMask) mk = mask + row * size;
    T* y = output + row * size;

    A xv[kVecs][VEC];
    bool keep[kVecs][VEC];
    A row_max = neg_inf(A{});
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const std::int64_t v = m.tid + static_cast<std::int64_t>(k) * m.nthreads;
      if (v < nvec) {
        load_vec<VEC>(x + v * VEC, xv[k]);
        load_keep<kHasMask, VEC>(mk, v * VEC, keep[k]);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          if (keep[k][j]) row_max = MaxOp{}(row_max, xv[k][j]);
        }
      }
    }
    row_max = row_reduce_max<kBlockPerRow>(row_max);

    A row_sum = 0;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const std::int64_t v = m.tid + static_cast<std::int64_t>(k) * m.nthreads;
      if (v < nvec) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          xv[k][j] = keep[k][j] ? exp_acc(xv[k][j] - row_max) : A(0);
          if (keep[k][j]) row_sum += xv[k][j];
        }
      }
    }
    row_sum = row_reduce_sum<kBlockPerRow>(row_sum);

#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const std::int64_t v = m.tid + static_cast<std::int64_t>(k) * m.nthreads;
      if (v < nvec) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) xv[k][j] = keep[k][j] ? xv[k][j] / row_sum : A(0);
        store_vec<VEC>(y + v * VEC, xv[k]);
      }
    }
  }
}

/// inner > 1 with many slices: one thread per slice (o, j); neighbouring threads read
/// neighbouring j.
template <typename T, bool kHasMask>
__global__ void masked_softmax_strided_kernel(const T* __restrict__ input,
                                              const std::uint8_t* __restrict__ mask,
                                              T* __restrict__ output, std::int64_t outer,
                                              std::int64_t size, std::int64_t inner) {
  using A = acc_t<T>;
  const std::int64_t n_slices = outer * inner;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t slice = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       slice < n_slices; slice += stride) {
    const std::int64_t o = slice / inner;
    const std::int64_t j = slice - o * inner;
    const std::int64_t base = o * size * inner + j;
    const auto kept = [&](std::int64_t s) { return !kHasMask || mask[base + s * inner] != 0; };

    A slice_max = neg_inf(A{});
    for (std::int64_t s = 0; s < size; ++s) {
      if (kept(s)) slice_max = MaxOp{}(slice_max, load_as_acc(input + base + s * inner));
    }
    A slice_sum = 0;
    for (std::int64_t s = 0; s < size; ++s) {
      if (kept(s)) slice_sum += exp_acc(load_as_acc(input + base + s * inner) - slice_max);
    }
    for (std::int64_t s = 0; s < size; ++s) {
      const std::int64_t e = base + s * inner;
      const A y = kept(s) ? exp_acc(load_as_acc(input + e) - slice_max) / slice_sum : A(0);
      store_from_acc(output + e, y);
    }
  }
}

/// inner > 1 with few slices: block (tile, ys) per (o, j tile); thread (x, y) handles
/// s = y, y + ys, ... of slice j = tile_start + x; max and sum are reduced over y.
template <typename T, bool kHasMask>
__global__ void masked_softmax_split_kernel(const T* __restrict__ input,
                                            const std::uint8_t* __restrict__ mask,
                                            T* __restrict__ output, std::int64_t outer,
                                            std::int64_t size, std::int64_t inner,
                                            std::int64_t tiles_per_outer) {
  using A = acc_t<T>;
  __shared__ A scratch[kElementwiseThreads];
  const std::int64_t n_blocks = outer * tiles_per_outer;
  for (std::int64_t b = blockIdx.x; b < n_blocks; b += gridDim.x) {  // uniform over the block
    const std::int64_t o = b / tiles_per_outer;
    const std::int64_t j = (b - o * tiles_per_outer) * blockDim.x + threadIdx.x;
    const bool active = j < inner;
    const std::int64_t base = o * size * inner + j;
    const auto kept = [&](std::int64_t s) { return !kHasMask || mask[base + s * inner] != 0; };

    A slice_max = neg_inf(A{});
    if (active) {
      for (std::int64_t s = threadIdx.y; s < size; s += blockDim.y) {
        if (kept(s)) slice_max = MaxOp{}(slice_max, load_as_acc(input + base + s * inner));
      }
    }
    slice_max = column_reduce(slice_max, MaxOp{}, scratch);
    A slice_sum = 0;
    if (active) {
      for (std::int64_t s = threadIdx.y; s < size; s += blockDim.y) {
        if (kept(s)) slice_sum += exp_acc(load_as_acc(input + base + s * inner) - slice_max);
      }
    }
    slice_sum = column_reduce(slice_sum, SumOp{}, scratch);
    if (active) {
      for (std::int64_t s = threadIdx.y; s < size; s += blockDim.y) {
        const std::int64_t e = base + s * inner;
        const A y = kept(s) ? exp_acc(load_as_acc(input + e) - slice_max) / slice_sum : A(0);
        store_from_acc(output + e, y);
      }
    }
  }
}

template <typename T, int VEC, bool kHasMask>
void launch_rows(const MaskedSoftmaxParams& p, const RowLaunch& l, cudaStream_t stream) {
  const auto* x = static_cast<const T*>(p.input);
  auto* y = static_cast<T*>(p.output);
  const dim3 grid(static_cast<unsigned>(l.blocks));
  const dim3 block(static_cast<unsigned>(l.threads));
  if constexpr (VEC > 1) {
    const int group = l.block_per_row ? l.threads : kWarpSize;
    const int cached = cached_vectors<acc_t<T>, VEC>(p.size / VEC, group);
    if (cached > 0) {
      dispatch_cached<acc_t<T>, VEC>(cached, [&](auto k) {
        constexpr int kVecs = decltype(k)::value;
        if (l.block_per_row) {
          masked_softmax_rows_cached_kernel<T, VEC, kVecs, true, kHasMask>
              <<<grid, block, 0, stream>>>(x, p.mask, y, p.outer, p.size);
        } else {
          masked_softmax_rows_cached_kernel<T, VEC, kVecs, false, kHasMask>
              <<<grid, block, 0, stream>>>(x, p.mask, y, p.outer, p.size);
        }
      });
      return;
    }
  }
  if (l.block_per_row) {
    masked_softmax_rows_kernel<T, VEC, true, kHasMask>
        <<<grid, block, 0, stream>>>(x, p.mask, y, p.outer, p.size);
  } else {
    masked_softmax_rows_kernel<T, VEC, false, kHasMask>
        <<<grid, block, 0, stream>>>(x, p.mask, y, p.outer, p.size);
  }
}

template <typename T, bool kHasMask>
void launch_masked(const MaskedSoftmaxParams& p, cudaStream_t stream) {
  if (p.inner == 1) {
    constexpr int kV = kVec16<T>;
    const bool vec = p.size % kV == 0 && is_aligned(p.input, 16) && is_aligned(p.output, 16) &&
                     is_aligned(p.mask, kV);
    const RowLaunch l = row_launch(p.outer, p.size, vec ? kV : 1);
    if (vec) {
      launch_rows<T, kV, kHasMask>(p, l, stream);
    } else {
      launch_rows<T, 1, kHasMask>(p, l, stream);
    }
  } else if (p.outer * p.inner < kSplitMinSlices) {
    const SplitLaunch l = split_launch(p.outer, p.inner);
    const dim3 grid(static_cast<unsigned>(l.blocks));
    const dim3 block(static_cast<unsigned>(l.tile), static_cast<unsigned>(l.ys));
    masked_softmax_split_kernel<T, kHasMask><<<grid, block, 0, stream>>>(
        static_cast<const T*>(p.input), p.mask, static_cast<T*>(p.output), p.outer, p.size, p.inner,
        l.tiles_per_outer);
  } else {
    const dim3 grid(static_cast<unsigned>(elementwise_blocks(p.outer * p.inner)));
    const dim3 block(kElementwiseThreads);
    masked_softmax_strided_kernel<T, kHasMask>
        <<<grid, block, 0, stream>>>(static_cast<const T*>(p.input), p.mask,
                                     static_cast<T*>(p.output), p.outer, p.size, p.inner);
  }
}

template <typename T>
cudaError_t launch_typed(const MaskedSoftmaxParams& p, cudaStream_t stream) {
  if (p.mask != nullptr) {
    launch_masked<T, true>(p, stream);
  } else {
    launch_masked<T, false>(p, stream);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_masked_softmax_fwd(const MaskedSoftmaxParams& p, cudaStream_t stream) {
  if (p.outer < 0 || p.size < 0 || p.inner < 0) return cudaErrorInvalidValue;
  if (p.outer == 0 || p.size == 0 || p.inner == 0) return cudaSuccess;
  if (p.input == nullptr || p.output == nullptr) return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
