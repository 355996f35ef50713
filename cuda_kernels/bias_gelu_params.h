#pragma once
// Launch parameters and launcher of the fused bias + GELU forward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of y = gelu(x + bias), bias broadcast along the last dim
/// (torch.nn.functional.gelu(input + bias, approximate=...); GELU: Hendrycks & Gimpel 2016).
/// All pointers are device pointers to contiguous row-major memory of element type `dtype`.
struct BiasGeluParams {
  /// Input x, shape [n_rows, cols] = [N, D], contiguous. Default: nullptr (must be set).
  const void* input = nullptr;
  /// Bias, shape [D], same dtype. Default: nullptr (must be set).
  const void* bias = nullptr;
  /// Output y, shape [N, D], same dtype, freshly allocated (may alias input for an in-place
  /// call; must not alias bias). Default: nullptr (must be set).
  void* output = nullptr;
  /// N: number of rows (every leading dim folded in), in elements. Default: 0.
  std::int64_t n_rows = 0;
  /// D: length of the last dim (the bias length), in elements. Default: 0.
  std::int64_t cols = 0;
  /// 0: exact GELU 0.5 * s * (1 + erf(s / sqrt(2))) ("none"); 1: tanh approximation
  /// 0.5 * s * (1 + tanh(sqrt(2 / pi) * (s + 0.044715 * s^3))) ("tanh"). Default: 0.
  int approximate = 0;
  /// Element type of input, bias and output. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues y = gelu(x + bias) on `stream` (torch.nn.functional.gelu(input + bias)).
/// s = x + bias is rounded to dtype first (as the two ATen ops input + bias, then gelu), gelu
/// computed in float32 (float64 for kFloat64). Grid-stride elementwise kernel with 16-byte
/// vector loads when D and the pointers allow.
/// \param p       the launch: device pointers, sizes in elements, dtype (see the fields of
///                BiasGeluParams: shapes x, y [N, D], bias [D])
/// \param stream  the CUDA stream to enqueue on (the glue passes the current stream of the
///                input's device)
/// \returns cudaErrorInvalidValue for negative sizes, null pointers, approximate not in {0, 1}
///          or an unknown dtype; cudaSuccess without launching when N * D == 0; else
///          cudaGetLastError() right after the launch (kernel faults surface at the next
///          synchronising call)
/// \throws nothing: errors are returned
/// Example:
///   BiasGeluParams p{.input = x, .bias = b, .output = y, .n_rows = n, .cols = d,
///                    .approximate = 1, .dtype = DType::kBFloat16};
///   C10_CUDA_CHECK(launch_bias_gelu_fwd(p, at::cuda::getCurrentCUDAStream()));
cudaError_t launch_bias_gelu_fwd(const BiasGeluParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
