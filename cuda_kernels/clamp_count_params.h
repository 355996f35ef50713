#pragma once
// Launch parameters and launcher of the clamp-and-count forward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of y = torch.clamp(x, min, max) plus the number of elements the clamp
/// changed, ((x < min) | (x > max)).sum(). Tensors are contiguous, `numel` elements each.
struct ClampCountParams {
  /// Input x, `numel` elements of `dtype`, contiguous. Default: nullptr (must be set).
  const void* input = nullptr;
  /// Output y, `numel` elements of `dtype`, freshly allocated (may alias input for an
  /// in-place call). Default: nullptr (must be set).
  void* output = nullptr;
  /// Device counter, one uint64 (the glue's int64 tensor); the kernel atomically ADDS the
  /// count of clamped elements, so the caller zeroes it first. Default: nullptr (must be set).
  unsigned long long* count = nullptr;
  /// Elements in input and output. Default: 0.
  std::int64_t numel = 0;
  /// Lower bound, in the input's units; rounded to dtype first. Default: 0.0 (the glue
  /// always sets it).
  double min = 0.0;
  /// Upper bound, in the input's units; rounded to dtype first. min > max gives max
  /// everywhere, as torch.clamp. Default: 0.0 (the glue always sets it).
  double max = 0.0;
  /// Element type of input and output. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues y = min(max(x, min), max) elementwise on `stream` and adds to *count the number
/// of elements with x < min or x > max (torch.clamp; NaN stays NaN and counts as neither).
/// min and max are rounded to dtype before use, as ATen converts a Scalar bound (and as the
/// comparison x < min against a Python scalar does). Grid-stride kernel, 16-byte vector loads
/// when the pointers allow; per-block count reduced with warp shuffles, one atomicAdd per block.
/// \param p       the launch: device pointers, sizes in elements, dtype (see the fields of
///                ClampCountParams: shapes x, y [numel], *count one int64)
/// \param stream  the CUDA stream to enqueue on (the glue passes the current stream of the
///                input's device)
/// \returns cudaErrorInvalidValue for a negative numel, null pointers or an unknown dtype;
///          cudaSuccess without launching (and without touching *count) when numel == 0; else
///          cudaGetLastError() right after the launch (kernel faults surface at the next
///          synchronising call)
/// \throws nothing: errors are returned
/// Example:
///   ClampCountParams p{.input = x, .output = y, .count = d_count, .numel = n,
///                      .min = -1.0, .max = 1.0, .dtype = DType::kFloat32};
///   C10_CUDA_CHECK(launch_clamp_count_fwd(p, at::cuda::getCurrentCUDAStream()));
cudaError_t launch_clamp_count_fwd(const ClampCountParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
