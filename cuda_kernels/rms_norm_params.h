#pragma once
// Launch parameters and launcher of the RMSNorm forward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of the RMSNorm forward kernel (Zhang & Sennrich 2019, "Root Mean Square
/// Layer Normalization"; torch.nn.functional.rms_norm with normalized_shape = [D]).
/// All pointers are device pointers to contiguous row-major memory of element type `dtype`.
struct RmsNormParams {
  /// Input x, shape [rows, cols] = [N, D], contiguous. Default: nullptr (must be set).
  const void* input = nullptr;
  /// Per-feature scale, shape [D], same dtype as input. Default: nullptr (must be set; the glue
  /// passes a tensor of ones when the schema's weight is None).
  const void* weight = nullptr;
  /// Output y, shape [N, D], same dtype, freshly allocated (must not alias input or weight).
  /// Default: nullptr (must be set).
  void* output = nullptr;
  /// N: number of rows (every leading dim folded in), in elements. Default: 0.
  std::int64_t rows = 0;
  /// D: length of the normalised (innermost) dim, in elements. Default: 0.
  std::int64_t cols = 0;
  /// Added to mean(x^2) before the rsqrt, in squared input units; cast to float32 (float64 for
  /// kFloat64) as ATen does. Default: 1e-6 (the glue passes the schema's eps, or, when it is
  /// None, the epsilon of the accumulate type, as ATen's rms_norm does).
  double eps = 1e-6;
  /// Element type of input, weight and output. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues y = x * rsqrt(mean(x^2 over the last dim) + eps) * weight on `stream`.
/// Computes in float32 (float64 for kFloat64) and rounds to dtype once, as ATen's
/// rms_norm_composite / _fused_rms_norm. One warp per row when D <= 1024, else one block per
/// row; 16-byte vector loads when D and the pointers allow.
/// \param p       the launch: device pointers, sizes in elements, dtype (see the fields of
///                RmsNormParams: shapes x, y [N, D], weight [D])
/// \param stream  the CUDA stream to enqueue on (the glue passes the current stream of the
///                input's device)
/// \returns cudaErrorInvalidValue for negative sizes, null pointers or an unknown dtype;
///          cudaSuccess without launching when N * D == 0; else cudaGetLastError() right after
///          the launch (kernel faults surface at the next synchronising call)
/// \throws nothing: errors are returned
/// Example:
///   RmsNormParams p{.input = x, .weight = w, .output = y, .rows = n, .cols = d,
///                   .eps = 1e-6, .dtype = DType::kFloat16};
///   C10_CUDA_CHECK(launch_rms_norm_fwd(p, at::cuda::getCurrentCUDAStream()));
cudaError_t launch_rms_norm_fwd(const RmsNormParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
