#pragma once
// Launch parameters and launcher of the clamp_count backward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of grad_input = grad where min <= x <= max, else 0 (the backward of
/// clamp_count's output; NaN x gives 0). All pointers are device pointers to contiguous memory
/// of `numel` elements of `dtype`.
struct ClampCountBackwardParams {
  /// g. Default: nullptr (must be set).
  const void* grad = nullptr;
  /// x. Default: nullptr (must be set).
  const void* input = nullptr;
  /// grad_input; written. Default: nullptr (must be set).
  void* grad_input = nullptr;
  /// Elements. Default: 0.
  std::int64_t numel = 0;
  /// The bounds, min <= max, rounded to dtype by the kernel. Defaults: 0.
  double min = 0;
  double max = 0;
  /// Element type. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues the backward on `stream`: a grid-stride elementwise kernel, compares in float32
/// (float64 for kFloat64) against the bounds rounded to dtype.
/// \param p       the launch (see the fields of ClampCountBackwardParams)
/// \param stream  the CUDA stream to enqueue on
/// \returns cudaErrorInvalidValue for a negative numel, null pointers, min > max or NaN bounds,
///          or an unknown dtype; cudaSuccess without launching when numel == 0; else
///          cudaGetLastError() right after the launch
/// \throws nothing: errors are returned
cudaError_t launch_clamp_count_bwd(const ClampCountBackwardParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
