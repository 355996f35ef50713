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

/// True when `t` is a contiguous float64 CPU tensor (not a negative view): values_of reads it
/// as it is.
inline bool is_dense_double(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble && t.device().is_cpu() && t.is_contiguous() && !t.is_neg();
}

/// `t` as a contiguous float64 CPU tensor of its shape: itself when it is one (no dispatch),
/// else a converted copy.
inline at::Tensor dense_double(const at::Tensor& t) {
  return is_dense_double(t) ? t : t.detach().to(at::kCPU, at::kDouble).resolve_neg().contiguous();
}

/// The elements of `t`, which must be a contiguous float64 CPU tensor (as flat_double and
/// Numerical return them). Throws c10::Error (internal assert) otherwise.
inline std::span<const double> values_of(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(is_dense_double(t),
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
/// differ. Equal values differ by 0, infinities and NaNs included: two runs that both give
/// +inf or both NaN at k agree there (inf - inf is NaN, which read as a nondeterministic
/// backward where the forward had overflowed).
inline double max_abs_diff(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (a[k] == b[k] || (std::isnan(a[k]) && std::isnan(b[k]))) continue;
    const double d = std::abs(a[k] - b[k]);
    if (std::isnan(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

/// A one-hot cotangent shaped like `like` (its dtype and device, no grad): 1 at flat element r.
/// A CPU float64/float32 one is written through its pointer; any other through select/fill_.
inline at::Tensor one_hot_like(const at::Tensor& like, int64_t r) {
  at::Tensor g = at::zeros({like.numel()}, like.options().requires_grad(false));
  if (g.device().is_cpu() && g.scalar_type() == at::kDouble) {
    g.mutable_data_ptr<double>()[r] = 1.0;
  } else if (g.device().is_cpu() && g.scalar_type() == at::kFloat) {
    g.mutable_data_ptr<float>()[r] = 1.0f;
  } else {
    g.select(0, r).fill_(1);
  }
  return g.view(like.sizes());
}

/// block[r, :] = row (block float64 CPU contiguous [m, n]; row n elements, flat float64 CPU
/// contiguous).
inline void set_row(at::Tensor& block, int64_t r, const at::Tensor& row) {
  const auto v = values_of(row);
  TORCH_INTERNAL_ASSERT(block.is_contiguous() && block.scalar_type() == at::kDouble &&
                            static_cast<int64_t>(v.size()) == block.size(1),
                        "set_row: a row of ", v.size(), " for a block ", block.sizes());
  double* dst = block.mutable_data_ptr<double>() + r * block.size(1);
  for (std::size_t k = 0; k < v.size(); ++k) dst[k] = v[k];
}

/// ATen's allclose(a, b, rtol, atol, equal_nan=true) over two spans of one length: each pair
/// equal (infinities of one sign included), both NaN, or |a - b| finite and
/// <= atol + |rtol b|.
inline bool all_close(std::span<const double> a, std::span<const double> b, double rtol,
                      double atol) {
  TORCH_INTERNAL_ASSERT(a.size() == b.size(), "all_close: ", a.size(), " vs ", b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (a[k] == b[k] || (std::isnan(a[k]) && std::isnan(b[k]))) continue;
    const double actual = std::abs(a[k] - b[k]);
    if (!(std::isfinite(actual) && actual <= atol + std::abs(rtol * b[k]))) return false;
  }
  return true;
}

}  // namespace customop::gradcheck::detail
