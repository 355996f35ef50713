#pragma once
// Launch parameters and launcher of the fused bias + GELU backward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of grad_input = g * gelu'(x + bias) and its per-column sums (the backward
/// of BiasGeluParams' op; gelu' of Hendrycks & Gimpel's 2016 GELU). All pointers are device
/// pointers to contiguous row-major memory.
struct BiasGeluBackwardParams {
  /// g, the incoming grad, shape [n_rows, cols], of `dtype`. Default: nullptr (must be set).
  const void* grad = nullptr;
  /// x, shape [n_rows, cols], of `dtype`. Default: nullptr (must be set).
  const void* input = nullptr;
  /// bias, shape [cols], of `dtype`. Default: nullptr (must be set).
  const void* bias = nullptr;
  /// grad_input, shape [n_rows, cols], of `dtype`; written. Default: nullptr (must be set).
  void* grad_input = nullptr;
  /// The column sums of grad_input before its rounding, in the accumulate type (float; double
  /// for kFloat64), shape [column_sum_bands(n_rows), cols] (common.h): row k holds the sums
  /// over the k-th band of rows; the caller adds the rows. Written. Default: nullptr (must be
  /// set).
  void* partial = nullptr;
  /// N: number of rows (every leading dim folded in), in elements. Default: 0.
  std::int64_t n_rows = 0;
  /// D: length of the last dim (the bias length), in elements. Default: 0.
  std::int64_t cols = 0;
  /// 0: exact GELU ("none"); 1: tanh approximation ("tanh"). Default: 0.
  int approximate = 0;
  /// Element type of grad, input, bias and grad_input. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues the backward on `stream`: s = x + bias rounded to dtype (as the forward), then
/// grad_input = g * gelu'(s) and the partial column sums, computed in float32 (float64 for
/// kFloat64). Blocks of 32 columns x 8 rows over bands of rows: loads and stores coalesced
/// along the columns, the band's sums reduced in shared memory, no atomics (the result does
/// not depend on scheduling).
/// \param p       the launch (see the fields of BiasGeluBackwardParams)
/// \param stream  the CUDA stream to enqueue on
/// \returns cudaErrorInvalidValue for negative sizes, null pointers, approximate not in {0, 1}
///          or an unknown dtype; cudaSuccess without launching when N * D == 0; else
///          cudaGetLastError() right after the launch
/// \throws nothing: errors are returned
cudaError_t launch_bias_gelu_bwd(const BiasGeluBackwardParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
