// Weighted sum forward: grid-stride elementwise kernel, K loads and FMAs per output element.
// Up to kWeightedSumMaxHostTable inputs travel in the kernel's parameters (no device table).

#include "cuda_kernels/weighted_sum_params.h"

namespace customop::cuda_kernels {
namespace {

using namespace detail;

/// The K input pointers and weights as the kernel reads them: from a device table
/// (DeviceTable, any K) or from its own parameters (ValueTable, K <= kWeightedSumMaxHostTable).
struct DeviceTable {
  const void* const* inputs;
  const double* weights;
  __device__ __forceinline__ const void* input(std::int64_t k) const { return inputs[k]; }
  __device__ __forceinline__ double weight(std::int64_t k) const { return weights[k]; }
};
struct ValueTable {
  const void* inputs[kWeightedSumMaxHostTable];
  double weights[kWeightedSumMaxHostTable];
  __device__ __forceinline__ const void* input(std::int64_t k) const { return inputs[k]; }
  __device__ __forceinline__ double weight(std::int64_t k) const { return weights[k]; }
};

/// y[i] for i in [begin, numel), one element per thread per step, `stride` elements apart.
template <typename T, typename Table>
__device__ __forceinline__ void weighted_sum_scalar(const Table& table, T* __restrict__ output,
                                                    std::int64_t k, std::int64_t begin,
                                                    std::int64_t numel, std::int64_t stride) {
  using A = acc_t<T>;
  for (std::int64_t i = begin; i < numel; i += stride) {
    A acc = 0;
    for (std::int64_t kk = 0; kk < k; ++kk) {
      acc += static_cast<A>(table.weight(kk)) *
             load_as_acc(static_cast<const T*>(table.input(kk)) + i);
    }
    store_from_acc(output + i, acc);
  }
}

/// VEC > 1 requires `output` to be VEC * sizeof(T) aligned (checked by the launcher); the
/// inputs' alignment is checked here, uniformly for the whole grid.
template <typename T, int VEC, typename Table>
__global__ void weighted_sum_fwd_kernel(const Table table, T* __restrict__ output, std::int64_t k,
                                        std::int64_t numel) {
  using A = acc_t<T>;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  bool vec_ok = VEC > 1;
  for (std::int64_t kk = 0; vec_ok && kk < k; ++kk) {
    vec_ok = (reinterpret_cast<std::uintptr_t>(table.input(kk)) % (VEC * sizeof(T))) == 0;
  }
  if (!vec_ok) {
    weighted_sum_scalar(table, output, k, tid, numel, stride);
    return;
  }
  const std::int64_t nvec = numel / VEC;
  for (std::int64_t v = tid; v < nvec; v += stride) {
    A acc[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] = 0;
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const A w = static_cast<A>(table.weight(kk));
      A xv[VEC];
      load_vec<VEC>(static_cast<const T*>(table.input(kk)) + v * VEC, xv);
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] += w * xv[j];
    }
    store_vec<VEC>(output + v * VEC, acc);
  }
  // Tail of numel % VEC elements.
  weighted_sum_scalar(table, output, k, nvec * VEC + tid, numel, stride);
}

template <typename T, typename Table>
void launch_table(const Table& table, const WeightedSumParams& p, cudaStream_t stream) {
  constexpr int kV = kVec16<T>;
  auto* y = static_cast<T*>(p.output);
  const dim3 block(kElementwiseThreads);
  if (is_aligned(p.output, 16)) {
    const dim3 grid(static_cast<unsigned>(elementwise_blocks(ceil_div(p.numel, kV))));
    weighted_sum_fwd_kernel<T, kV, Table><<<grid, block, 0, stream>>>(table, y, p.k, p.numel);
  } else {
    const dim3 grid(static_cast<unsigned>(elementwise_blocks(p.numel)));
    weighted_sum_fwd_kernel<T, 1, Table><<<grid, block, 0, stream>>>(table, y, p.k, p.numel);
  }
}

template <typename T>
cudaError_t launch_typed(const WeightedSumParams& p, cudaStream_t stream) {
  if (p.table_on_host) {
    ValueTable table{};
    for (std::int64_t kk = 0; kk < p.k; ++kk) {
      table.inputs[kk] = p.inputs[kk];
      table.weights[kk] = p.weights[kk];
    }
    launch_table<T>(table, p, stream);
  } else {
    launch_table<T>(DeviceTable{p.inputs, p.weights}, p, stream);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_weighted_sum_fwd(const WeightedSumParams& p, cudaStream_t stream) {
  if (p.k < 0 || p.numel < 0) return cudaErrorInvalidValue;
  if (p.numel == 0) return cudaSuccess;
  if (p.output == nullptr || (p.k > 0 && (p.inputs == nullptr || p.weights == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (p.table_on_host && p.k > kWeightedSumMaxHostTable) return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
