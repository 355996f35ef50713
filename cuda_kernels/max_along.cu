// Max along a dim with first-index ties and NaN propagation (torch.max(input, dim)).
// The (value, index) pairs are combined with one strict total order (see `beats`), so the
// result does not depend on the order in which threads and shuffles meet them.

#include "cuda_kernels/max_along_params.h"

namespace customop::cuda_kernels {
namespace {

using namespace detail;

/// Index of the "no element" identity; any real index beats it on a value tie.
inline constexpr std::int64_t kNoIndex = INT64_MAX;

/// True when (v2, i2) should replace (v1, i1): any NaN beats any number, the lower index wins
/// between two NaNs or two equal numbers, else the larger number wins.
template <typename A>
__device__ __forceinline__ bool beats(A v2, std::int64_t i2, A v1, std::int64_t i1) {
  const bool nan1 = isnan(v1);
  const bool nan2 = isnan(v2);
  if (nan1 || nan2) return nan2 && (!nan1 || i2 < i1);
  return v2 > v1 || (v2 == v1 && i2 < i1);
}

/// One thread's scan step: does x (index i) replace (best, best_i)? The thread meets its
/// indices in increasing order, so `beats` reduces to: nothing kept yet, or best is not NaN
/// and x is NaN or larger (a tie, or a later NaN, keeps the earlier index). Cheaper per
/// element than `beats` (no 64-bit index compare), which still combines the threads.
template <typename A>
__device__ __forceinline__ void scan_step(A x, std::int64_t i, A& best, std::int64_t& best_i) {
  if (best_i == kNoIndex || (!isnan(best) && (isnan(x) || x > best))) {
    best = x;
    best_i = i;
  }
}

template <typename A>
__device__ __forceinline__ void warp_argmax(A& v, std::int64_t& i) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const A ov = __shfl_xor_sync(kFullMask, v, offset);
    const std::int64_t oi = __shfl_xor_sync(kFullMask, i, offset);
    if (beats(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

/// Block-wide argmax; every thread gets the result. Same contract as block_reduce.
template <typename A>
__device__ __forceinline__ void block_argmax(A& v, std::int64_t& i) {
  __shared__ A part_v[kWarpSize];
  __shared__ std::int64_t part_i[kWarpSize];
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int num_warps = static_cast<int>(blockDim.x) / kWarpSize;
  warp_argmax(v, i);
  __syncthreads();  // NB: the previous row's call may still be reading part_*[0].
  if (lane == 0) {
    part_v[warp] = v;
    part_i[warp] = i;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < num_warps ? part_v[lane] : neg_inf(A{});
    i = lane < num_warps ? part_i[lane] : kNoIndex;
    warp_argmax(v, i);
    if (lane == 0) {
      part_v[0] = v;
      part_i[0] = i;
    }
  }
  __syncthreads();
  v = part_v[0];
  i = part_i[0];
}

/// inner == 1: rows of `size` contiguous elements. VEC divides size; input is VEC-aligned.
template <typename T, int VEC, bool kBlockPerRow>
__global__ void __launch_bounds__(kMaxBlockThreads, kRowMinBlocksPerSm)
    max_along_rows_kernel(const T* __restrict__ input, T* __restrict__ values,
                          std::int64_t* __restrict__ indices, std::int64_t rows,
                          std::int64_t size) {
  using A = acc_t<T>;
  const auto m = RowMapping<kBlockPerRow>::make();
  const std::int64_t nvec = size / VEC;
  for (std::int64_t row = m.first_row; row < rows; row += m.row_stride) {
    const T* x = input + row * size;
    A best = neg_inf(A{});
    std::int64_t best_i = kNoIndex;
#pragma unroll 4
    for (std::int64_t v = m.tid; v < nvec; v += m.nthreads) {
      A xv[VEC];
      load_vec<VEC>(x + v * VEC, xv);
#pragma unroll
      for (int j = 0; j < VEC; ++j) scan_step(xv[j], v * VEC + j, best, best_i);
    }
    if constexpr (kBlockPerRow) {
      block_argmax(best, best_i);
    } else {
      warp_argmax(best, best_i);
    }
    if (m.tid == 0) {
      store_from_acc(values + row, best);
      indices[row] = best_i;
    }
  }
}

/// inner > 1 with many outputs: one thread per output (o, j); neighbouring threads read
/// neighbouring j.
template <typename T>
__global__ void max_along_strided_kernel(const T* __restrict__ input, T* __restrict__ values,
                                         std::int64_t* __restrict__ indices, std::int64_t outer,
                                         std::int64_t size, std::int64_t inner) {
  using A = acc_t<T>;
  const std::int64_t n_out = outer * inner;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t out = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       out < n_out; out += stride) {
    const std::int64_t o = out / inner;
    const std::int64_t j = out - o * inner;
    const T* x = input + o * size * inner + j;
    A best = neg_inf(A{});
    std::int64_t best_i = kNoIndex;
    for (std::int64_t s = 0; s < size; ++s) {
      const A xv = load_as_acc(x + s * inner);
      if (beats(xv, s, best, best_i)) {
        best = xv;
        best_i = s;
        if (isnan(xv)) break;  // the first NaN is final
      }
    }
    store_from_acc(values + out, best);
    indices[out] = best_i;
  }
}

/// inner > 1 with few outputs: block (tile, ys) per (o, j tile); thread (x, y) scans
/// s = y, y + ys, ... for j = tile_start + x, then the column is reduced over y.
template <typename T>
__global__ void max_along_split_kernel(const T* __restrict__ input, T* __restrict__ values,
                                       std::int64_t* __restrict__ indices, std::int64_t outer,
                                       std::int64_t size, std::int64_t inner,
                                       std::int64_t tiles_per_outer) {
  using A = acc_t<T>;
  __shared__ A scratch_v[kElementwiseThreads];
  __shared__ std::int64_t scratch_i[kElementwiseThreads];
  const int cols = static_cast<int>(blockDim.x);
  const int t = static_cast<int>(threadIdx.y) * cols + static_cast<int>(threadIdx.x);
  const std::int64_t n_blocks = outer * tiles_per_outer;
  for (std::int64_t b = blockIdx.x; b < n_blocks; b += gridDim.x) {  // uniform over the block
    const std::int64_t o = b / tiles_per_outer;
    const std::int64_t j = (b - o * tiles_per_outer) * cols + threadIdx.x;
    A best = neg_inf(A{});
    std::int64_t best_i = kNoIndex;
    if (j < inner) {
      const T* x = input + o * size * inner + j;
      for (std::int64_t s = threadIdx.y; s < size; s += blockDim.y) {
        const A xv = load_as_acc(x + s * inner);
        if (beats(xv, s, best, best_i)) {
          best = xv;
          best_i = s;
        }
      }
    }
    scratch_v[t] = best;
    scratch_i[t] = best_i;
    __syncthreads();
    for (int half = static_cast<int>(blockDim.y) / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.y) < half) {
        const int u = t + half * cols;
        if (beats(scratch_v[u], scratch_i[u], scratch_v[t], scratch_i[t])) {
          scratch_v[t] = scratch_v[u];
          scratch_i[t] = scratch_i[u];
        }
      }
      __syncthreads();
    }
    if (threadIdx.y == 0 && j < inner) {
      store_from_acc(values + o * inner + j, scratch_v[t]);
      indices[o * inner + j] = scratch_i[t];
    }
    __syncthreads();  // row 0 has read scratch before the next tile overwrites it
  }
}

template <typename T, int VEC>
void launch_rows(const MaxAlongParams& p, const RowLaunch& l, cudaStream_t stream) {
  const auto* x = static_cast<const T*>(p.input);
  auto* vals = static_cast<T*>(p.values);
  const dim3 grid(static_cast<unsigned>(l.blocks));
  const dim3 block(static_cast<unsigned>(l.threads));
  if (l.block_per_row) {
    max_along_rows_kernel<T, VEC, true>
        <<<grid, block, 0, stream>>>(x, vals, p.indices, p.outer, p.size);
  } else {
    max_along_rows_kernel<T, VEC, false>
        <<<grid, block, 0, stream>>>(x, vals, p.indices, p.outer, p.size);
  }
}

template <typename T>
cudaError_t launch_typed(const MaxAlongParams& p, cudaStream_t stream) {
  if (p.inner == 1) {
    constexpr int kV = kVec16<T>;
    const bool vec = p.size % kV == 0 && is_aligned(p.input, 16);
    const RowLaunch l = row_launch(p.outer, p.size, vec ? kV : 1);
    if (vec) {
      launch_rows<T, kV>(p, l, stream);
    } else {
      launch_rows<T, 1>(p, l, stream);
    }
  } else if (p.outer * p.inner < kSplitMinSlices) {
    const SplitLaunch l = split_launch(p.outer, p.inner);
    const dim3 grid(static_cast<unsigned>(l.blocks));
    const dim3 block(static_cast<unsigned>(l.tile), static_cast<unsigned>(l.ys));
    max_along_split_kernel<T>
        <<<grid, block, 0, stream>>>(static_cast<const T*>(p.input), static_cast<T*>(p.values),
                                     p.indices, p.outer, p.size, p.inner, l.tiles_per_outer);
  } else {
    const dim3 grid(static_cast<unsigned>(elementwise_blocks(p.outer * p.inner)));
    const dim3 block(kElementwiseThreads);
    max_along_strided_kernel<T><<<grid, block, 0, stream>>>(static_cast<const T*>(p.input),
                                                            static_cast<T*>(p.values), p.indices,
                                                            p.outer, p.size, p.inner);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_max_along_fwd(const MaxAlongParams& p, cudaStream_t stream) {
  if (p.outer < 0 || p.size < 0 || p.inner < 0) return cudaErrorInvalidValue;
  if (p.outer == 0 || p.inner == 0) return cudaSuccess;
  if (p.size == 0) return cudaErrorInvalidValue;
  if (p.input == nullptr || p.values == nullptr || p.indices == nullptr)
    return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
