#include "detail/equal_to_rounding.h"

#include "detail/compare.h"
#include "detail/function.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace customop::gradcheck::detail {

namespace {

double rounding(c10::ScalarType t) {
  switch (t) {
    case at::kDouble: return std::numeric_limits<double>::epsilon();
    case at::kHalf: return 9.765625e-4;
    case at::kBFloat16: return 7.8125e-3;
    default: return std::numeric_limits<float>::epsilon();
  }
}

}  // namespace

RoundingScale rounding_scale(const std::vector<at::Tensor>& leaves) {
  RoundingScale rs;
  int64_t k = 1;
  for (const auto& l : leaves) {
    k = std::max<int64_t>(k, l.numel());
    rs.input = std::max(rs.input, largest_finite_abs(l));
  }
  rs.reduction = 4 + std::sqrt(static_cast<double>(k));
  return rs;
}

std::string differs(const at::Tensor& got, const at::Tensor& want, const RoundingScale& rs,
                    double slack) {
  if (!want.defined() && !got.defined()) return {};
  if (want.defined() != got.defined()) {
    return got.defined() ? "defined where the given layout's is undefined"
                         : "undefined where the given layout's is defined";
  }
  if (got.sizes() != want.sizes()) {
    return "has shape " + format_sizes(got.sizes()) + " instead of " + format_sizes(want.sizes());
  }
  if (got.numel() == 0) return {};
  if (!at::isFloatingType(want.scalar_type())) {
    return at::equal(got.detach().cpu(), want.detach().cpu()) ? "" : "holds other values";
  }
  const at::Tensor a = got.detach().to(at::kCPU, at::kDouble);
  const at::Tensor b = want.detach().to(at::kCPU, at::kDouble);
  const at::Tensor finite_b = at::where(at::isfinite(b), b.abs(), at::zeros_like(b));
  const double scale = std::max(rs.input, finite_b.max().item<double>());
  const double tol = 16 * rs.reduction * rounding(want.scalar_type()) * scale + slack;
  const at::Tensor same = ((a - b).abs() <= tol) | (a == b) | (at::isnan(a) & at::isnan(b));
  if (same.all().item<bool>()) return {};
  const at::Tensor diff = at::where(same, at::zeros_like(a), (a - b).abs().nan_to_num(INFINITY));
  const int64_t k = diff.reshape({-1}).argmax().item<int64_t>();
  return "differs at " + format_index(unravel(k, b.sizes())) + ": " +
         sci(a.reshape({-1})[k].item<double>()) + " instead of " +
         sci(b.reshape({-1})[k].item<double>()) + " (" +
         std::to_string((~same).sum().item<int64_t>()) + " of " + std::to_string(b.numel()) +
         " elements differ beyond rounding, " + sci(tol) + ")";
}

}  // namespace customop::gradcheck::detail
