#pragma once
// Launch parameters and launcher of the max_along backward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of grad_input[o, s, i] = grad[o, i] where indices[o, i] == s, else 0 (the
/// backward of max_along's values). All pointers are device pointers to contiguous memory.
struct MaxAlongBackwardParams {
  /// g, shape [outer, inner], of `dtype`. Default: nullptr (must be set).
  const void* grad = nullptr;
  /// Indices along the reduced dim, shape [outer, inner], int64. One outside [0, size) matches
  /// no s: its slice stays 0 (the caller checks the range). Default: nullptr (must be set).
  const std::int64_t* indices = nullptr;
  /// grad_input, shape [outer, size, inner], of `dtype`; written. Default: nullptr (must be
  /// set).
  void* grad_input = nullptr;
  /// Product of the dims before the reduced dim. Default: 0.
  std::int64_t outer = 0;
  /// Length of the reduced dim. Default: 0.
  std::int64_t size = 0;
  /// Product of the dims after the reduced dim. Default: 1.
  std::int64_t inner = 1;
  /// Element type of grad and grad_input. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues the backward on `stream`: a grid-stride kernel over grad_input, each element
/// written once (its index read once per element, from cache within a slice).
/// \param p       the launch (see the fields of MaxAlongBackwardParams)
/// \param stream  the CUDA stream to enqueue on
/// \returns cudaErrorInvalidValue for negative sizes, null pointers or an unknown dtype;
///          cudaSuccess without launching when outer * size * inner == 0; else
///          cudaGetLastError() right after the launch
/// \throws nothing: errors are returned
cudaError_t launch_max_along_bwd(const MaxAlongBackwardParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
