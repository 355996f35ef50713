#pragma once
// "Equal to rounding": two correct evaluations of the same values by different routes (another
// memory layout, another set of inputs requiring grad) may differ by rounding only. Internal to
// customop_gradcheck.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace customop::gradcheck::detail {

/// How far two correct evaluations may differ: a reduction over K terms summed in another
/// order rounds differently by up to ~sqrt(K) u |terms| (typically), so
/// 16 u (4 + sqrt(K)) max(1, |result|, |input|), with K the largest input's element count.
struct RoundingScale {
  double reduction = 4;  ///< 4 + sqrt(K)
  double input = 1;      ///< max(1, max |input|) over the finite input elements
};

/// The scale for the inputs `leaves` (any dtype and device).
RoundingScale rounding_scale(const std::vector<at::Tensor>& leaves);

/// Empty when `got` equals `want` to rounding (RoundingScale, plus `slack`; NaN matches NaN;
/// non-floating tensors exactly), else what differs: the worst element, both values, how many
/// elements differ and the tolerance, or the shape / definedness that differs.
std::string differs(const at::Tensor& got, const at::Tensor& want, const RoundingScale& rs,
                    double slack = 0);

}  // namespace customop::gradcheck::detail
