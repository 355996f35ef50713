// Clamp and count forward: grid-stride elementwise kernel; each thread counts locally, the
// block reduces the counts with warp shuffles and adds them with one atomicAdd.

#include "cuda_kernels/clamp_count_params.h"

namespace customop::cuda_kernels {
namespace {

using namespace detail;

/// Clamp one value; `changed` is incremented when x lies outside [lo, hi].
template <typename A>
__device__ __forceinline__ A clamp_one(A x, A lo, A hi, unsigned long long& changed) {
  if (isnan(x)) return x;  // as torch.clamp: NaN stays NaN and is not counted
  changed += (x < lo || x > hi) ? 1ull : 0ull;
  // NB: max first, then min, so that lo > hi yields hi everywhere, as torch.clamp.
  const A y = x < lo ? lo : x;
  return y > hi ? hi : y;
}

/// VEC > 1 requires input and output to be VEC * sizeof(T) aligned (checked by the launcher).
template <typename T, int VEC>
__global__ void clamp_count_fwd_kernel(const T* input, T* output,
                                       unsigned long long* __restrict__ count, std::int64_t numel,
                                       double min, double max) {
  using A = acc_t<T>;
  const A lo = to_acc(scalar_to<T>(min));
  const A hi = to_acc(scalar_to<T>(max));
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  unsigned long long changed = 0;
  const std::int64_t nvec = numel / VEC;
  for (std::int64_t v = tid; v < nvec; v += stride) {
    A xv[VEC];
    load_vec<VEC>(input + v * VEC, xv);
#pragma unroll
    for (int j = 0; j < VEC; ++j) xv[j] = clamp_one(xv[j], lo, hi, changed);
    store_vec<VEC>(output + v * VEC, xv);
  }
  // Tail of numel % VEC elements (none when VEC == 1).
  for (std::int64_t i = nvec * VEC + tid; i < numel; i += stride) {
    store_from_acc(output + i, clamp_one(load_as_acc(input + i), lo, hi, changed));
  }
  changed = block_reduce_sum(changed);
  if (threadIdx.x == 0 && changed != 0) atomicAdd(count, changed);
}

template <typename T>
cudaError_t launch_typed(const ClampCountParams& p, cudaStream_t stream) {
  constexpr int kV = kVec16<T>;
  const auto* x = static_cast<const T*>(p.input);
  auto* y = static_cast<T*>(p.output);
  const dim3 block(kElementwiseThreads);
  if (is_aligned(p.input, 16) && is_aligned(p.output, 16)) {
    const dim3 grid(static_cast<unsigned>(elementwise_blocks(ceil_div(p.numel, kV))));
    clamp_count_fwd_kernel<T, kV><<<grid, block, 0, stream>>>(x, y, p.count, p.numel, p.min, p.max);
  } else {
    const dim3 grid(static_cast<unsigned>(elementwise_blocks(p.numel)));
    clamp_count_fwd_kernel<T, 1><<<grid, block, 0, stream>>>(x, y, p.count, p.numel, p.min, p.max);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_clamp_count_fwd(const ClampCountParams& p, cudaStream_t stream) {
  if (p.numel < 0) return cudaErrorInvalidValue;
  if (p.numel == 0) return cudaSuccess;
  if (p.input == nullptr || p.output == nullptr || p.count == nullptr) return cudaErrorInvalidValue;
  return dispatch_floating(
      p.dtype, [&](auto t) { return launch_typed<typename decltype(t)::type>(p, stream); });
}

}  // namespace customop::cuda_kernels
