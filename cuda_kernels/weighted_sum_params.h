#pragma once
// Launch parameters and launcher of the weighted-sum forward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of y = sum_k w_k * x_k over K tensors of one shape (the forward of
/// torch.stack(xs).mul(w.view(-1, 1...)).sum(0), accumulated without intermediate rounding).
/// All tensors are contiguous, of element type `dtype`, `numel` elements each.
struct WeightedSumParams {
  /// Device array of K device pointers; inputs[k] points at x_k, `numel` elements of `dtype`,
  /// contiguous. The glue copies the pointer table to the device. Default: nullptr (must be
  /// set when k > 0).
  const void* const* inputs = nullptr;
  /// Device array of K float64 weights w_k (unitless), cast to the accumulate type in the
  /// kernel. Default: nullptr (must be set when k > 0).
  const double* weights = nullptr;
  /// Output y, `numel` elements of `dtype`, freshly allocated (must not alias any x_k).
  /// Default: nullptr (must be set).
  void* output = nullptr;
  /// K: number of inputs (= length of inputs and weights); K == 0 writes zeros. Default: 0.
  std::int64_t k = 0;
  /// Elements in each input and in the output. Default: 0.
  std::int64_t numel = 0;
  /// Element type of every x_k and of y. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues y[i] = sum_k w_k * x_k[i] on `stream`, accumulated in float32 (float64 for
/// kFloat64) and rounded to dtype once. Grid-stride elementwise kernel; 16-byte vector loads
/// when the output and every x_k are 16-byte aligned (checked on the device, since the
/// pointer table lives there).
/// \param p       the launch: device pointers, sizes in elements, dtype (see the fields of
///                WeightedSumParams: shapes K inputs and y [numel], weights [K])
/// \param stream  the CUDA stream to enqueue on (the glue passes the current stream of the
///                input's device)
/// \returns cudaErrorInvalidValue for negative sizes, null pointers or an unknown dtype;
///          cudaSuccess without launching when numel == 0; else cudaGetLastError() right after
///          the launch (kernel faults surface at the next synchronising call)
/// \throws nothing: errors are returned
/// Example:
///   WeightedSumParams p{.inputs = d_ptrs, .weights = d_w, .output = y, .k = 3,
///                       .numel = n, .dtype = DType::kFloat32};
///   C10_CUDA_CHECK(launch_weighted_sum_fwd(p, at::cuda::getCurrentCUDAStream()));
cudaError_t launch_weighted_sum_fwd(const WeightedSumParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
