#pragma once
// Launch parameters and launcher of the weighted-sum forward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Most inputs a launch may pass in host memory (WeightedSumParams::table_on_host): the
/// launcher copies them into the kernel's parameters (16 pointers + 16 weights, 256 bytes).
inline constexpr std::int64_t kWeightedSumMaxHostTable = 16;

/// Launch parameters of y = sum_k w_k * x_k over K tensors of one shape (the forward of
/// torch.stack(xs).mul(w.view(-1, 1...)).sum(0), accumulated without intermediate rounding).
/// All tensors are contiguous, of element type `dtype`, `numel` elements each.
struct WeightedSumParams {
  /// Array of K device pointers; inputs[k] points at x_k, `numel` elements of `dtype`,
  /// contiguous. In device memory, or in host memory when table_on_host. Default: nullptr
  /// (must be set when k > 0).
  const void* const* inputs = nullptr;
  /// Array of K float64 weights w_k (unitless), cast to the accumulate type in the kernel; in
  /// device memory, or in host memory when table_on_host. Default: nullptr (must be set when
  /// k > 0).
  const double* weights = nullptr;
  /// True: `inputs` and `weights` are host arrays of K <= kWeightedSumMaxHostTable entries,
  /// read at launch into the kernel's parameters (no device table and no copy on the stream,
  /// so the launch can be captured in a CUDA graph; the glue does this). False: they are
  /// device arrays, any K. Default: false.
  bool table_on_host = false;
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
/// \returns cudaErrorInvalidValue for negative sizes, null pointers, an unknown dtype, or
///          table_on_host with K > kWeightedSumMaxHostTable;
///          cudaSuccess without launching when numel == 0; else cudaGetLastError() right after
///          the launch (kernel faults surface at the next synchronising call)
/// \throws nothing: errors are returned
/// Example:
///   WeightedSumParams p{.inputs = d_ptrs, .weights = d_w, .output = y, .k = 3,
///                       .numel = n, .dtype = DType::kFloat32};
///   C10_CUDA_CHECK(launch_weighted_sum_fwd(p, at::cuda::getCurrentCUDAStream()));
cudaError_t launch_weighted_sum_fwd(const WeightedSumParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
