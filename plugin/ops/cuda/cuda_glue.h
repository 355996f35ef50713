#pragma once
// Shared pieces of the libtorch glue to the torch-free kernels in cuda_kernels/.

#include "cuda_kernels/common.h"

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

namespace customop::ops::detail {

/// The kernels' dtype tag for a dtype check_floating() has accepted.
inline cuda_kernels::DType to_kernel_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return cuda_kernels::DType::kFloat32;
    case c10::ScalarType::Double: return cuda_kernels::DType::kFloat64;
    case c10::ScalarType::Half: return cuda_kernels::DType::kFloat16;
    case c10::ScalarType::BFloat16: return cuda_kernels::DType::kBFloat16;
    default: TORCH_CHECK(false, "customop: no CUDA kernel dtype for ", dtype);
  }
}

/// Throws, naming the op, when a launcher (or the CUDA call after it) failed.
inline void check_launch(const char* op, cudaError_t err) {
  TORCH_CHECK(err == cudaSuccess, op, ": CUDA kernel failed: ", cudaGetErrorName(err), " (",
              cudaGetErrorString(err), ")");
}

}  // namespace customop::ops::detail
