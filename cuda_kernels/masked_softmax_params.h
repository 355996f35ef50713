#pragma once
// Launch parameters and launcher of the masked softmax forward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of a softmax over one dim restricted to the unmasked elements, for a
/// contiguous x viewed as [outer, size, inner] (outer = prod of dims before `dim`, size =
/// x.size(dim), inner = prod of dims after it). Unmasked: torch.softmax(x, dim) over the
/// kept elements (max-subtracted, numerically stable); masked-out elements get 0, and a fully
/// masked slice gives all zeros (never NaN).
struct MaskedSoftmaxParams {
  /// Input x, shape [outer, size, inner], contiguous, element type `dtype`.
  /// Default: nullptr (must be set).
  const void* input = nullptr;
  /// Keep-mask, shape [outer, size, inner] (the input's), contiguous, bool stored as one byte
  /// per element (0 = masked out, nonzero = kept). nullptr = keep everything (plain softmax).
  /// Default: nullptr.
  const std::uint8_t* mask = nullptr;
  /// Output y, shape [outer, size, inner], contiguous, element type `dtype`, freshly
  /// allocated. Default: nullptr (must be set).
  void* output = nullptr;
  /// Product of the dims before the softmax dim, in elements (1 when dim == 0). Default: 0.
  std::int64_t outer = 0;
  /// Length of the softmax dim, in elements. Default: 0.
  std::int64_t size = 0;
  /// Product of the dims after the softmax dim, in elements (1 when dim is the last).
  /// Default: 1.
  std::int64_t inner = 1;
  /// Element type of input and output. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues a softmax over the kept elements of each slice along the middle dim on `stream`:
/// y = exp(x - m) / sum(exp(x - m)) with m the max of the kept elements, y = 0 where masked.
/// Computed in float32 (float64 for kFloat64). As torch.softmax: a NaN among the kept
/// elements, or a kept +inf, or kept elements that are all -inf, make the slice's kept outputs
/// NaN. inner == 1: one warp (size <= 1024) or one block per slice, 16-byte vector loads;
/// inner > 1: one thread per slice (or, below 65536 slices, a block per up to 32 slices
/// splitting the softmax dim), reading coalesced along inner.
/// \param p       the launch: device pointers, sizes in elements, dtype (see the fields of
///                MaskedSoftmaxParams: shapes x, y and mask [outer, size, inner])
/// \param stream  the CUDA stream to enqueue on (the glue passes the current stream of the
///                input's device)
/// \returns cudaErrorInvalidValue for negative sizes, null input/output or an unknown dtype;
///          cudaSuccess without launching when outer * size * inner == 0; else
///          cudaGetLastError() right after the launch (kernel faults surface at the next
///          synchronising call)
/// \throws nothing: errors are returned
/// Example:
///   MaskedSoftmaxParams p{.input = x, .mask = m, .output = y, .outer = b * h,
///                         .size = s, .inner = 1, .dtype = DType::kFloat16};
///   C10_CUDA_CHECK(launch_masked_softmax_fwd(p, at::cuda::getCurrentCUDAStream()));
cudaError_t launch_masked_softmax_fwd(const MaskedSoftmaxParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
