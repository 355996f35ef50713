#pragma once
// Element loops over the small float64 CPU vectors of a check (differences, projections,
// directions). A check's vectors hold tens to thousands of elements, where each ATen call's
// dispatch and allocation (~2,000-10,000 instructions) costs more than the arithmetic: the
// arithmetic on them runs here as plain loops, one allocation per result. Internal to
// customop_gradcheck.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstdint>
#include <span>

namespace customop::gradcheck::detail {

/// The elements of `t`, which must be a contiguous float64 CPU tensor (as flat_double and
/// Numerical return them). Throws c10::Error (internal assert) otherwise.
inline std::span<const double> values_of(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(t.scalar_type() == at::kDouble && t.device().is_cpu() && t.is_contiguous(),
                        "values_of: expected a contiguous float64 CPU tensor, got ", t.toString(),
                        " ", t.sizes());
  return {t.const_data_ptr<double>(), static_cast<std::size_t>(t.numel())};
}

/// A new float64 CPU tensor [n] with element k = f(k).
template <class F>
at::Tensor tabulate(int64_t n, F&& f) {
  at::Tensor t = at::empty({n}, at::TensorOptions().dtype(at::kDouble));
  double* p = t.mutable_data_ptr<double>();
  for (int64_t k = 0; k < n; ++k) p[k] = f(k);
  return t;
}

/// sum_k f(k) for k in [0, n).
template <class F>
double sum_over(int64_t n, F&& f) {
  double s = 0;
  for (int64_t k = 0; k < n; ++k) s += f(k);
  return s;
}

/// Euclidean norm of `a`.
inline double norm2(std::span<const double> a) {
  double s = 0;
  for (const double x : a) s += x * x;
  return std::sqrt(s);
}

/// max_k |a_k - b_k|, NaN counted as +inf; 0 when both are empty, +inf when their lengths
/// differ.
inline double max_abs_diff(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const double d = std::abs(a[k] - b[k]);
    if (std::isnan(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace customop::gradcheck::detail
