#pragma once
// Argument checks shared by the built-in ops. Every message starts with "<op>: <argument>"
// (the schema's spelling) and streams the expected and the actual value.

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace customop::ops::detail {

/// Python spelling of a dtype for messages: "float32", "bfloat16", "int64", "bool".
std::string dtype_name(c10::ScalarType dtype);

/// `<op>: <arg> must be on the same device as <ref_arg> (cuda:0), but got cpu`.
void check_same_device(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                       const at::Tensor& ref);

/// The floating dtypes every kernel takes (CPU, CUDA and fake): float16, bfloat16, float32,
/// float64. `<op>: <arg> must be float16, bfloat16, float32 or float64, but got int64`.
/// `device` is kept for a device whose kernels take fewer.
void check_floating(const char* op, const char* arg, const at::Tensor& t, c10::DeviceType device);

/// `<op>: <arg> must have the dtype of <ref_arg> (float32), but got float64`.
void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref);

/// `dim` wrapped into [0, ndim) (a 0-d tensor counts as 1-d, as ATen's reductions do).
/// `<op>: dim must be in [-2, 1] for a 2-d input, but got 2`.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

/// A contiguous tensor viewed as [outer, size, inner] around dim `dim` (already wrapped).
struct OuterSizeInner {
  int64_t outer = 1;
  int64_t size = 1;
  int64_t inner = 1;
};
OuterSizeInner split_at_dim(c10::IntArrayRef sizes, int64_t dim);

}  // namespace customop::ops::detail
