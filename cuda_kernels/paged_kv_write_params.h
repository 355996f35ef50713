#pragma once
// Launch parameters and launcher of the paged KV-cache write (vLLM's reshape_and_cache).

#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda_kernels/common.h"

namespace customop::cuda_kernels {

/// Launch parameters of paged_kv_write: token t's row (heads * head_size elements,
/// `row_bytes` bytes) goes to slot slot_mapping[t] of each cache; a negative slot skips the
/// token. The glue has checked every slot (in range, none twice) before the launch.
struct PagedKvWriteParams {
  /// Keys and values, [tokens, row_bytes] contiguous. Default: nullptr.
  const void* key = nullptr;
  const void* value = nullptr;
  /// Caches, [slots, row_bytes] contiguous (blocks * block_size slots). Default: nullptr.
  void* key_cache = nullptr;
  void* value_cache = nullptr;
  /// [tokens] int64 slot of each token. Default: nullptr.
  const std::int64_t* slot_mapping = nullptr;
  /// Number of tokens. Default: 0.
  std::int64_t tokens = 0;
  /// Bytes of one token's row (heads * head_size * element size). Default: 0.
  std::int64_t row_bytes = 0;
};

/// Enqueues the copies on `stream`: one block per token, 16-byte stores when row_bytes and
/// the pointers allow, bytes otherwise.
/// \returns cudaErrorInvalidValue for negative sizes or null pointers; cudaSuccess without
///          launching when there is nothing to copy; else cudaGetLastError()
/// \throws nothing
cudaError_t launch_paged_kv_write(const PagedKvWriteParams& p, cudaStream_t stream);

}  // namespace customop::cuda_kernels
