#pragma once
// Shared pieces of the torch-free CUDA kernels: the dtype tag every params aggregate carries,
// and (nvcc only) the device helpers the kernels share: accumulate-type conversions, 16-byte
// vector loads, warp/block reductions.
//
// NB: the <op>_params.h headers include this file from host-only C++ (the libtorch glue), so
// everything that needs nvcc sits behind `#if defined(__CUDACC__)`.

#include <cstdint>
#include <type_traits>
#include <utility>

#include <cuda_runtime_api.h>

namespace customop::cuda_kernels {

/// Element type of the tensors a launcher reads and writes (one dtype per launch).
/// float16 and bfloat16 accumulate in float32, float32 in float32, float64 in float64.
enum class DType : int { kFloat32, kFloat64, kFloat16, kBFloat16 };

/// ceil(a / b) for a >= 0, b > 0.
__host__ __device__ inline constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

/// Bands of rows of a backward kernel's column sums (a weight's or bias's grad summed over the
/// rows): one band per 64 rows, at most 512 (>= 1 for n_rows >= 1). The kernel writes one row
/// of partial sums per band, [bands, cols] in the accumulate type; the caller adds the rows.
inline constexpr std::int64_t column_sum_bands(std::int64_t n_rows) {
  const std::int64_t bands = ceil_div(n_rows, 64);
  return bands < 1 ? 1 : (bands > 512 ? 512 : bands);
}

}  // namespace customop::cuda_kernels

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace customop::cuda_kernels::detail {

/// An element type passed as a value, so that a generic lambda can name it:
/// `[&](auto t) { using T = typename decltype(t)::type; ... }`. NB: std::type_identity is
/// C++20, and nvcc compiles these files as C++17 under CMake 3.25.
template <typename T>
struct TypeTag {
  using type = T;
};

/// The dtype switch of every launcher, written once: returns fn(TypeTag<T>{}) with T the
/// element type `dtype` names (float, double, __half, __nv_bfloat16), or cudaErrorInvalidValue
/// for a value outside DType.
///   return dispatch_floating(p.dtype, [&](auto t) {
///     return launch_typed<typename decltype(t)::type>(p, stream);
///   });
template <typename Fn>
cudaError_t dispatch_floating(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return std::forward<Fn>(fn)(TypeTag<float>{});
    case DType::kFloat64: return std::forward<Fn>(fn)(TypeTag<double>{});
    case DType::kFloat16: return std::forward<Fn>(fn)(TypeTag<__half>{});
    case DType::kBFloat16: return std::forward<Fn>(fn)(TypeTag<__nv_bfloat16>{});
  }
  return cudaErrorInvalidValue;
}

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;
/// Upper bound on blockDim.x of the row-wise kernels, which carry
/// __launch_bounds__(kMaxBlockThreads, kRowMinBlocksPerSm).
inline constexpr int kMaxBlockThreads = 512;
/// NB: __launch_bounds__ without a min-blocks count makes ptxas aim at full occupancy (32
/// registers) and spill; 2 blocks of 512 threads allow 64 registers and still fit any launch.
inline constexpr int kRowMinBlocksPerSm = 2;
/// Threads per block of the elementwise kernels and of the generic strided (inner > 1) paths.
/// They carry no __launch_bounds__: 256 threads fit even at ptxas' 255-register maximum.
inline constexpr int kElementwiseThreads = 256;
/// Warps (= rows) per block of the warp-per-row kernels.
inline constexpr int kRowsPerWarpBlock = 8;
/// Row-wise ops switch from one warp per row to one block per row above this many columns.
inline constexpr std::int64_t kWarpRowMaxCols = 1024;
/// Cap on gridDim.x; every kernel loops grid-stride, so a smaller grid is only slower.
inline constexpr std::int64_t kMaxGridBlocks = std::int64_t{1} << 20;
/// Cap on gridDim.x for elementwise kernels (grid-stride loops; ~8 waves of 256-thread blocks
/// on 132 SMs is enough to saturate HBM).
inline constexpr std::int64_t kMaxElementwiseBlocks = 8192;

// ---- accumulate type and conversions ------------------------------------------------------

template <typename T>
struct AccType {
  using type = float;
};
template <>
struct AccType<double> {
  using type = double;
};
/// The type a kernel computes in for element type T (float for half/bf16/float, double for double).
template <typename T>
using acc_t = typename AccType<T>::type;

/// Math in the accumulate type: the float or double CUDA function, by overload.
__device__ __forceinline__ float erf_acc(float x) { return erff(x); }
__device__ __forceinline__ double erf_acc(double x) { return erf(x); }
__device__ __forceinline__ float exp_acc(float x) { return expf(x); }
__device__ __forceinline__ double exp_acc(double x) { return exp(x); }
__device__ __forceinline__ float tanh_acc(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_acc(double x) { return tanh(x); }
__device__ __forceinline__ float rsqrt_acc(float x) { return rsqrtf(x); }
__device__ __forceinline__ double rsqrt_acc(double x) { return rsqrt(x); }

__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }

/// Round an accumulate-type value to element type T (round to nearest even, as ATen).
template <typename T>
__device__ __forceinline__ T from_acc(acc_t<T> x);
template <>
__device__ __forceinline__ float from_acc<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ double from_acc<double>(double x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_acc<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/// Round a double scalar (a params field) to element type T, as c10::Scalar::to<T>() does.
template <typename T>
__device__ __forceinline__ T scalar_to(double x);
template <>
__device__ __forceinline__ float scalar_to<float>(double x) {
  return static_cast<float>(x);
}
template <>
__device__ __forceinline__ double scalar_to<double>(double x) {
  return x;
}
template <>
__device__ __forceinline__ __half scalar_to<__half>(double x) {
  return __double2half(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 scalar_to<__nv_bfloat16>(double x) {
  return __double2bfloat16(x);
}

/// Load one element of T and widen it to the accumulate type.
template <typename T>
__device__ __forceinline__ acc_t<T> load_as_acc(const T* p) {
  return to_acc(*p);
}
/// Round an accumulate-type value to T and store it.
template <typename T>
__device__ __forceinline__ void store_from_acc(T* p, acc_t<T> x) {
  *p = from_acc<T>(x);
}
/// x rounded to T and widened back: mirrors an ATen op that materialises a T tensor in between.
template <typename T>
__device__ __forceinline__ acc_t<T> round_to(acc_t<T> x) {
  return to_acc(from_acc<T>(x));
}

/// -infinity of the accumulate type (the argument only selects the overload).
__device__ __forceinline__ float neg_inf(float) { return -__int_as_float(0x7f800000); }
__device__ __forceinline__ double neg_inf(double) {
  return -__longlong_as_double(0x7ff0000000000000LL);
}

// ---- vectorized (16-byte) access ----------------------------------------------------------

/// Elements of T in one 16-byte load: 4 float, 2 double, 8 half/bfloat16.
template <typename T>
inline constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

template <typename T, int N>
struct alignas(sizeof(T) * N) AlignedVec {
  T val[N];
};

/// Load N consecutive elements (p must be aligned to N * sizeof(T)) widened to acc_t<T>.
template <int N, typename T>
__device__ __forceinline__ void load_vec(const T* p, acc_t<T> (&out)[N]) {
  const AlignedVec<T, N> v = *reinterpret_cast<const AlignedVec<T, N>*>(p);
#pragma unroll
  for (int j = 0; j < N; ++j) out[j] = to_acc(v.val[j]);
}

/// Round N accumulate-type values to T and store them (p aligned to N * sizeof(T)).
template <int N, typename T>
__device__ __forceinline__ void store_vec(T* p, const acc_t<T> (&in)[N]) {
  AlignedVec<T, N> v;
#pragma unroll
  for (int j = 0; j < N; ++j) v.val[j] = from_acc<T>(in[j]);
  *reinterpret_cast<AlignedVec<T, N>*>(p) = v;
}

/// Load N consecutive mask bytes (p aligned to N bytes) as booleans.
template <int N>
__device__ __forceinline__ void load_mask_vec(const std::uint8_t* p, bool (&out)[N]) {
  const AlignedVec<std::uint8_t, N> v = *reinterpret_cast<const AlignedVec<std::uint8_t, N>*>(p);
#pragma unroll
  for (int j = 0; j < N; ++j) out[j] = v.val[j] != 0;
}

/// True when p is aligned to `bytes` (a power of two); a null pointer counts as aligned.
inline bool is_aligned(const void* p, std::uintptr_t bytes) {
  return (reinterpret_cast<std::uintptr_t>(p) & (bytes - 1)) == 0;
}

// ---- reductions ---------------------------------------------------------------------------
// NB: every lane of the warp (every thread of the block) must call these, with the same
// control flow; the butterfly (__shfl_xor_sync) leaves the result in all lanes.

struct SumOp {
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a + b;
  }
};
/// max that ignores NaN (fmax): softmax still turns a NaN input into NaN through its exp/sum.
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ double operator()(double a, double b) const { return fmax(a, b); }
};

template <typename Op, typename A>
__device__ __forceinline__ A warp_reduce(A v, Op op) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

template <typename A>
__device__ __forceinline__ A warp_reduce_sum(A v) {
  return warp_reduce(v, SumOp{});
}
template <typename A>
__device__ __forceinline__ A warp_reduce_max(A v) {
  return warp_reduce(v, MaxOp{});
}

/// Reduce over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets
/// the result. `identity` fills the lanes of warp 0 that have no warp partial to read.
template <typename Op, typename A>
__device__ __forceinline__ A block_reduce(A v, Op op, A identity) {
  __shared__ A partial[kWarpSize];
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int num_warps = static_cast<int>(blockDim.x) / kWarpSize;
  v = warp_reduce(v, op);
  __syncthreads();  // NB: a previous call may still be reading partial[0].
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < num_warps ? partial[lane] : identity;
    v = warp_reduce(v, op);
    if (lane == 0) partial[0] = v;  // warp 0 has read partial[] before the shuffles above
  }
  __syncthreads();
  return partial[0];
}

template <typename A>
__device__ __forceinline__ A block_reduce_sum(A v) {
  return block_reduce(v, SumOp{}, A(0));
}
template <typename A>
__device__ __forceinline__ A block_reduce_max(A v) {
  return block_reduce(v, MaxOp{}, neg_inf(A{}));
}

/// Sum over a row's worker group: the warp (warp-per-row kernels) or the block.
template <bool kBlockPerRow, typename A>
__device__ __forceinline__ A row_reduce_sum(A v) {
  if constexpr (kBlockPerRow) {
    return block_reduce_sum(v);
  } else {
    return warp_reduce_sum(v);
  }
}
template <bool kBlockPerRow, typename A>
__device__ __forceinline__ A row_reduce_max(A v) {
  if constexpr (kBlockPerRow) {
    return block_reduce_max(v);
  } else {
    return warp_reduce_max(v);
  }
}

/// How the row-wise kernels map rows to threads: a warp per row (kBlockPerRow == false,
/// blockDim.x / 32 rows per block) or a block per row. The row loop is grid-stride, so its
/// trip count is uniform over the group that shares a row (required by the reductions).
template <bool kBlockPerRow>
struct RowMapping {
  std::int64_t first_row;   // first row of this group
  std::int64_t row_stride;  // rows between consecutive iterations of this group
  int tid;                  // thread index within the group
  int nthreads;             // threads in the group

  __device__ __forceinline__ static RowMapping make() {
    RowMapping m;
    if constexpr (kBlockPerRow) {
      m.first_row = blockIdx.x;
      m.row_stride = gridDim.x;
      m.tid = static_cast<int>(threadIdx.x);
      m.nthreads = static_cast<int>(blockDim.x);
    } else {
      const std::int64_t groups = blockDim.x / kWarpSize;
      m.first_row = static_cast<std::int64_t>(blockIdx.x) * groups + threadIdx.x / kWarpSize;
      m.row_stride = static_cast<std::int64_t>(gridDim.x) * groups;
      m.tid = static_cast<int>(threadIdx.x) % kWarpSize;
      m.nthreads = kWarpSize;
    }
    return m;
  }
};

/// Reduce v over threadIdx.y, separately for each threadIdx.x column (blockDim.y a power of
/// two), through `scratch`: blockDim.x * blockDim.y elements of shared memory. Every thread of
/// the column gets the result. NB: every thread of the block must call it.
template <typename Op, typename A>
__device__ __forceinline__ A column_reduce(A v, Op op, A* scratch) {
  const int cols = static_cast<int>(blockDim.x);
  const int t = static_cast<int>(threadIdx.y) * cols + static_cast<int>(threadIdx.x);
  scratch[t] = v;
  __syncthreads();
  for (int half = static_cast<int>(blockDim.y) / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.y) < half) scratch[t] = op(scratch[t], scratch[t + half * cols]);
    __syncthreads();
  }
  const A result = scratch[threadIdx.x];
  __syncthreads();  // all have read scratch[] before a later call writes it
  return result;
}

/// The inner > 1 paths use one thread per output slice (o, j) of [outer, size, inner] while
/// there are at least this many slices; below it that would leave an H200 (132 SMs x 2048
/// threads) mostly idle, so a block instead splits each slice over threadIdx.y.
inline constexpr std::int64_t kSplitMinSlices = 65536;

/// Launch shape of a split strided kernel: blockDim = (tile, kElementwiseThreads / tile), where
/// tile (a power of two <= 32) neighbouring j of one o share a block and threadIdx.y strides
/// over the reduced dim; one block per (o, j tile), grid-stride.
struct SplitLaunch {
  int tile;                      // blockDim.x: inner indices per block
  int ys;                        // blockDim.y: threads splitting the reduced dim
  std::int64_t tiles_per_outer;  // ceil(inner / tile)
  std::int64_t blocks;           // gridDim.x
};

inline SplitLaunch split_launch(std::int64_t outer, std::int64_t inner) {
  SplitLaunch l{};
  l.tile = 1;
  while (l.tile < kWarpSize && l.tile < inner) l.tile *= 2;
  l.ys = kElementwiseThreads / l.tile;
  l.tiles_per_outer = ceil_div(inner, l.tile);
  const std::int64_t blocks = outer * l.tiles_per_outer;
  l.blocks = blocks < kMaxGridBlocks ? blocks : kMaxGridBlocks;
  return l;
}

/// Launch shape of a row-wise kernel for `rows` rows of `cols` elements, `vec` per load.
struct RowLaunch {
  bool block_per_row;
  int threads;
  std::int64_t blocks;
};

inline RowLaunch row_launch(std::int64_t rows, std::int64_t cols, int vec) {
  RowLaunch l{};
  l.block_per_row = cols > kWarpRowMaxCols;
  if (!l.block_per_row) {
    l.threads = kRowsPerWarpBlock * kWarpSize;
    l.blocks = ceil_div(rows, kRowsPerWarpBlock);
  } else {
    // 256 threads while that leaves each at most 4 vectors, else kMaxBlockThreads.
    const std::int64_t nvec = ceil_div(cols, vec);
    l.threads = nvec <= 1024 ? 256 : kMaxBlockThreads;
    l.blocks = rows;
  }
  l.blocks = l.blocks < kMaxGridBlocks ? l.blocks : kMaxGridBlocks;
  return l;
}

/// Accumulate-type values of a row one thread may keep in registers in a single-pass row
/// kernel, under __launch_bounds__(kMaxBlockThreads, kRowMinBlocksPerSm) (64 registers): 32
/// float (128 bytes) or 8 double. Read off `nvcc -Xptxas -v` for sm_90: the masked_softmax
/// kernels at 32 float use 55-64 registers and spill at most 50 bytes (block per row, masked);
/// at 16 double they spill 46-112 bytes, at 64 float (bf16/fp16 with 8 vectors) 268-580.
template <typename A>
inline constexpr int kMaxCachedValues = sizeof(A) == 8 ? 8 : 32;

/// Vectors per thread of a single-pass (register-cached) row kernel with accumulate type A:
/// the smallest of 1, 2, 4, 8 that holds a row of `nvec` vectors of VEC elements over
/// `threads` threads within kMaxCachedValues<A>, or 0 when none does (the multi-pass kernel
/// then runs).
template <typename A, int VEC>
inline int cached_vectors(std::int64_t nvec, int threads) {
  const std::int64_t per_thread = ceil_div(nvec, threads);
  for (int k = 1; k <= 8; k *= 2) {
    if (per_thread <= k) return k * VEC <= kMaxCachedValues<A> ? k : 0;
  }
  return 0;
}

/// fn(std::integral_constant<int, K>{}) for K = k (cached_vectors<A, VEC>' result, not 0).
/// Only the counts cached_vectors can return are instantiated.
template <typename A, int VEC, typename Fn>
void dispatch_cached(int k, Fn&& fn) {
  constexpr int kMax = kMaxCachedValues<A> / VEC;
  if constexpr (kMax >= 8) {
    if (k == 8) return fn(std::integral_constant<int, 8>{});
  }
  if constexpr (kMax >= 4) {
    if (k == 4) return fn(std::integral_constant<int, 4>{});
  }
  if constexpr (kMax >= 2) {
    if (k == 2) return fn(std::integral_constant<int, 2>{});
  }
  return fn(std::integral_constant<int, 1>{});
}

// ---- column sums by bands of rows (column_sum_bands) ----------------------------------------

/// Columns and rows of a column-sum block: (kBandCols, kBandRows) threads, thread (tx, ty)
/// walking column blockIdx.x * kBandCols + tx over the rows ty, ty + kBandRows, ... of band
/// blockIdx.y (loads coalesced along the columns).
inline constexpr int kBandCols = 32;
inline constexpr int kBandRows = 8;

/// The rows [first, end) of band blockIdx.y when each band holds `band_rows` rows.
struct BandRows {
  std::int64_t first;
  std::int64_t end;
};
__device__ __forceinline__ BandRows band_rows(std::int64_t rows, std::int64_t band_rows) {
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.y) * band_rows;
  return {first, first + band_rows < rows ? first + band_rows : rows};
}

/// Adds each thread's `v` over threadIdx.y and writes the block's column sums to row
/// blockIdx.y of `partial` ([bands, cols]). NB: every thread of the block must call it.
template <typename A>
__device__ __forceinline__ void store_band_sums(A v, A* partial, std::int64_t col,
                                                std::int64_t cols) {
  __shared__ A sums[kBandRows][kBandCols + 1];
  sums[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    A total = sums[0][threadIdx.x];
#pragma unroll
    for (int k = 1; k < kBandRows; ++k) total += sums[k][threadIdx.x];
    partial[static_cast<std::int64_t>(blockIdx.y) * cols + col] = total;
  }
}

/// Grid size of an elementwise (grid-stride) kernel doing `work` items.
inline std::int64_t elementwise_blocks(std::int64_t work) {
  const std::int64_t b = ceil_div(work, kElementwiseThreads);
  return b < kMaxElementwiseBlocks ? b : kMaxElementwiseBlocks;
}

}  // namespace customop::cuda_kernels::detail

#endif  // defined(__CUDACC__)
