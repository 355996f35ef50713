#pragma once
// Launch parameters and launcher of the masked softmax backward kernel.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of grad_input = y * (g - sum(g * y, dim)) (softmax's VJP; the backward
/// of MaskedSoftmaxParams' op, whose masked elements have y = 0) for contiguous tensors viewed
/// as [outer, size, inner] around the softmax dim. All pointers are device pointers.
struct MaskedSoftmaxBackwardParams {
  /// g, shape [outer, size, inner], of `dtype`. Default: nullptr (must be set).
  const void* grad = nullptr;
  /// y, the forward's output, shape [outer, size, inner], of `dtype`. Default: nullptr (must be
  /// set).
  const void* output = nullptr;
  /// grad_input, shape [outer, size, inner], of `dtype`; written. Default: nullptr (must be
  /// set).
  void* grad_input = nullptr;
  /// Product of the dims before the softmax dim (1 when dim == 0). Default: 0.
  std::int64_t outer = 0;
  /// Length of the softmax dim. Default: 0.
  std::int64_t size = 0;
  /// Product of the dims after the softmax dim (1 when dim is the last). Default: 1.
  std::int64_t inner = 1;
  /// Element type. Default: kFloat32.
  DType dtype = DType::kFloat32;
};

/// Enqueues the backward on `stream`, computed in float32 (float64 for kFloat64) and rounded
/// once. inner == 1: a warp (size <= 1024) or a block per slice, one reduction of g y and one
/// write pass (the second read hits L1/L2); inner > 1: a thread per slice, reading coalesced
/// along inner.
/// \param p       the launch (see the fields of MaskedSoftmaxBackwardParams)
/// \param stream  the CUDA stream to enqueue on
/// \returns cudaErrorInvalidValue for negative sizes, null pointers or an unknown dtype;
///          cudaSuccess without launching when outer * size * inner == 0; else
///          cudaGetLastError() right after the launch
/// \throws nothing: errors are returned
cudaError_t launch_masked_softmax_bwd(const MaskedSoftmaxBackwardParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
