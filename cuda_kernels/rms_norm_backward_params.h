#pragma once
// Launch parameters and launcher of the RMSNorm backward kernels.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of rms_norm's backward: with r = rsqrt(mean(x^2) + eps) per row,
/// grad_input = r g w - r^3 mean(g w x) x, and grad_weight's column sums of g x r by bands of
/// rows (Zhang & Sennrich 2019, RMSNorm, differentiated by hand). All pointers are device
/// pointers to contiguous row-major memory.
struct RmsNormBackwardParams {
  /// g, shape [n_rows, cols], of `dtype`. Default: nullptr (must be set).
  const void* grad = nullptr;
  /// x, shape [n_rows, cols], of `dtype`. Default: nullptr (must be set).
  const void* input = nullptr;
  /// w, shape [cols], of `dtype`. Default: nullptr (must be set).
  const void* weight = nullptr;
  /// grad_input, shape [n_rows, cols], of `dtype`; written. Default: nullptr (must be set).
  void* grad_input = nullptr;
  /// r per row, [n_rows], in the accumulate type (float; double for kFloat64); scratch the
  /// first kernel writes and the second reads. Default: nullptr (must be set).
  void* inv_rms = nullptr;
  /// grad_weight's column sums in the accumulate type, [column_sum_bands(n_rows), cols]
  /// (common.h): row k sums the k-th band of rows; the caller adds the rows. Written. Default:
  /// nullptr (must be set).
  void* partial = nullptr;
  /// N: number of rows (every leading dim folded in). Default: 0.
  std::int64_t n_rows = 0;
  /// D: length of the last dim (the weight length). Default: 0.
  std::int64_t cols = 0;
  /// Added to mean(x^2), >= 0. Default: 1e-6.
  double eps = 1e-6;
  /// Element type of grad, input, weight and grad_input. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues the backward on `stream`: a block per row (both sums reduced in the block, then
/// grad_input and r written), then blocks of 32 columns x 8 rows over bands of rows for the
/// partial column sums (coalesced along the columns, no atomics: the result does not depend on
/// scheduling). Computes in float32 (float64 for kFloat64); grad_input rounded once.
/// \param p       the launch (see the fields of RmsNormBackwardParams)
/// \param stream  the CUDA stream to enqueue on
/// \returns cudaErrorInvalidValue for negative sizes or eps, null pointers or an unknown
///          dtype; cudaSuccess without launching when N * D == 0; else cudaGetLastError()
///          right after the launches
/// \throws nothing: errors are returned
cudaError_t launch_rms_norm_bwd(const RmsNormBackwardParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
