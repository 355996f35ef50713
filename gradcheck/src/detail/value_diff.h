#pragma once
// Where a variant of an op (out=, in-place) wrote something other than the functional op's
// result. Internal to customop_gradcheck.

#include <ATen/core/Tensor.h>

#include <string>

namespace customop::gradcheck::detail {

/// The first element where `got` and `want` differ (NaN equal to NaN; floating values within
/// 8 units of 1e-15 (float64) or 1e-6 (other floating dtypes), relative and absolute), as
/// "element [i, j]: <got>, the functional op gives <want> (n of m elements differ)"; a size or
/// dtype difference as "sizes ..., expected ..."; "" when they agree. Either may be on any
/// device (compared on the CPU).
std::string first_difference(const at::Tensor& got, const at::Tensor& want);

/// As above with the tolerance given: floating values agree within `eps`, relative and absolute
/// (|got - want| <= eps * |want| + eps).
std::string first_difference(const at::Tensor& got, const at::Tensor& want, double eps);

}  // namespace customop::gradcheck::detail
