#pragma once
// Launch parameters and launcher of the max-along-a-dim forward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of (values, indices) = torch.max(x, dim) for a contiguous x viewed as
/// [outer, size, inner] (outer = prod of dims before `dim`, size = x.size(dim), inner = prod
/// of dims after it). Semantics of torch.max(input, dim): ties give the first index; if the
/// slice holds a NaN, the value is NaN and the index that of the first NaN.
struct MaxAlongParams {
  /// Input x, shape [outer, size, inner], contiguous, element type `dtype`.
  /// Default: nullptr (must be set).
  const void* input = nullptr;
  /// Output max values, shape [outer, inner], contiguous, element type `dtype`, freshly
  /// allocated. Default: nullptr (must be set).
  void* values = nullptr;
  /// Output argmax along the reduced dim, shape [outer, inner], int64, in [0, size).
  /// Default: nullptr (must be set).
  std::int64_t* indices = nullptr;
  /// Product of the dims before the reduced one, in elements (1 when dim == 0). Default: 0.
  std::int64_t outer = 0;
  /// Length of the reduced dim, in elements; must be > 0 when outer * inner > 0 (the glue
  /// rejects an empty reduction as torch.max does). Default: 0.
  std::int64_t size = 0;
  /// Product of the dims after the reduced one, in elements (1 when dim is the last).
  /// Default: 1.
  std::int64_t inner = 1;
  /// Element type of input and values. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues the max over the middle dim of [outer, size, inner] on `stream`, with its index
/// (torch.max(input, dim) semantics for NaN and ties). inner == 1: one warp (size <= 1024) or
/// one block per row with 16-byte vector loads; inner > 1: one thread per output (or, below
/// 65536 outputs, a block per up to 32 outputs splitting the reduced dim), reading coalesced
/// along inner.
/// \param p       the launch: device pointers, sizes in elements, dtype (see the fields of
///                MaxAlongParams: shapes x [outer, size, inner], values and indices
///                [outer, inner])
/// \param stream  the CUDA stream to enqueue on (the glue passes the current stream of the
///                input's device)
/// \returns cudaErrorInvalidValue for negative sizes, size == 0 with outer * inner > 0, null
///          pointers or an unknown dtype; cudaSuccess without launching when
///          outer * inner == 0; else cudaGetLastError() right after the launch (kernel faults
///          surface at the next synchronising call)
/// \throws nothing: errors are returned
/// Example:
///   MaxAlongParams p{.input = x, .values = v, .indices = idx, .outer = 8, .size = 1000,
///                    .inner = 1, .dtype = DType::kFloat32};
///   C10_CUDA_CHECK(launch_max_along_fwd(p, at::cuda::getCurrentCUDAStream()));
cudaError_t launch_max_along_fwd(const MaxAlongParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
