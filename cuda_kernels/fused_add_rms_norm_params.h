#pragma once
// Launch parameters and launcher of the fused residual-add + RMSNorm kernel (in place).

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of fused_add_rms_norm_ (vLLM's fused_add_rms_norm): residual += input,
/// then input = rms_norm(residual) * weight. Device pointers to contiguous row-major memory
/// of element type `dtype`.
struct FusedAddRmsNormParams {
  /// x, shape [N, D]; read, then written with the normalized row. Default: nullptr.
  void* input = nullptr;
  /// r, shape [N, D]; read, then written with r + x rounded to dtype. Must not overlap input.
  /// Default: nullptr.
  void* residual = nullptr;
  /// Per-feature scale, shape [D]. Default: nullptr.
  const void* weight = nullptr;
  /// N: rows (every leading dim folded in). Default: 0.
  std::int64_t rows = 0;
  /// D: the normalised (innermost) dim, in elements. Default: 0.
  std::int64_t cols = 0;
  /// Added to mean(s^2) before the rsqrt. Default: 1e-6.
  double eps = 1e-6;
  /// Element type of input, residual and weight. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues the fused add + RMSNorm on `stream`: one warp (D <= 1024) or one block per row;
/// pass 1 writes s = x + r (rounded) into residual and reduces s^2 from the rounded values,
/// pass 2 writes (s * rsqrt(mean + eps)) * w into input, in float32 (float64 for kFloat64).
/// \returns cudaErrorInvalidValue for negative sizes, null pointers or an unknown dtype;
///          cudaSuccess without launching when N * D == 0; else cudaGetLastError()
/// \throws nothing
cudaError_t launch_fused_add_rms_norm(const FusedAddRmsNormParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
