#include "detail/checks.h"

#include <c10/util/Exception.h>

namespace customop::ops::detail {

// NB: getDtypeNames returns std::string up to torch 2.14 and std::string_view from 2.15.
std::string dtype_name(c10::ScalarType dtype) {
  return std::string(c10::getDtypeNames(dtype).first);
}

void check_same_device(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                       const at::Tensor& ref) {
  TORCH_CHECK(t.device() == ref.device(), op, ": ", arg, " must be on the same device as ", ref_arg,
              " (", ref.device(), "), but got ", t.device());
}

void check_floating(const char* op, const char* arg, const at::Tensor& t,
                    c10::DeviceType /*device*/) {
  const auto st = t.scalar_type();
  // NB: every device's kernels take the four (CPU: cpu/vec_io.h; CUDA: cuda_kernels/).
  TORCH_CHECK_TYPE(st == at::kFloat || st == at::kDouble || st == at::kHalf || st == at::kBFloat16,
                   op, ": ", arg, " must be float16, bfloat16, float32 or float64, but got ",
                   dtype_name(st));
}

void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref) {
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), op, ": ", arg, " must have the dtype of ",
                   ref_arg, " (", dtype_name(ref.scalar_type()), "), but got ",
                   dtype_name(t.scalar_type()));
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  const int64_t n = ndim == 0 ? 1 : ndim;
  TORCH_CHECK_VALUE(dim >= -n && dim < n, op, ": dim must be in [", -n, ", ", n - 1, "] for a ",
                    ndim, "-d input, but got ", dim);
  return dim < 0 ? dim + n : dim;
}

OuterSizeInner split_at_dim(c10::IntArrayRef sizes, int64_t dim) {
  OuterSizeInner s;
  if (sizes.empty()) return s;  // a 0-d tensor is [1, 1, 1]
  for (int64_t i = 0; i < dim; ++i) s.outer *= sizes[i];
  s.size = sizes[dim];
  for (int64_t i = dim + 1; i < static_cast<int64_t>(sizes.size()); ++i) s.inner *= sizes[i];
  return s;
}

}  // namespace customop::ops::detail
