#pragma once
/// \file
/// Assertion helpers for tensor results: closeness to a reference (the first bad element and
/// the max error in the failure message) and per-dtype tolerances.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace customop::testing {

/// rtol/atol for comparing a result of `dtype` with a float64 reference of O(1) values.
struct Tolerance {
  double rtol;
  double atol;
};

inline Tolerance tolerance_for(c10::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble: return {1e-12, 1e-12};
    case at::kFloat: return {1e-5, 1e-5};
    case at::kHalf: return {2e-3, 2e-3};
    case at::kBFloat16: return {2e-2, 2e-2};
    default: return {0, 0};
  }
}

/// Same shape, and |actual - expected| <= atol + rtol * |expected| everywhere (NaN matches
/// NaN, inf matches an equal inf); compared in float64 on the CPU.
inline ::testing::AssertionResult tensors_close(const at::Tensor& actual,
                                                const at::Tensor& expected, Tolerance tol) {
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure()
           << "shape " << actual.sizes() << " != expected " << expected.sizes();
  }
  if (actual.numel() == 0) return ::testing::AssertionSuccess();
  const at::Tensor a = actual.detach().to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor e = expected.detach().to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor same_nonfinite = (a == e) | (a.isnan() & e.isnan());
  const at::Tensor err = (a - e).abs();
  const at::Tensor bad = ((err > tol.atol + tol.rtol * e.abs()) | err.isnan()) & ~same_nonfinite;
  if (!bad.any().item<bool>()) return ::testing::AssertionSuccess();
  const int64_t idx = bad.flatten().nonzero()[0].item<int64_t>();
  std::ostringstream msg;
  msg << bad.sum().item<int64_t>() << " of " << a.numel() << " elements differ (rtol " << tol.rtol
      << ", atol " << tol.atol << "); first at flat index " << idx << ": got "
      << a.flatten()[idx].item<double>() << ", expected " << e.flatten()[idx].item<double>()
      << "; max abs error " << err.nan_to_num(0).max().item<double>();
  return ::testing::AssertionFailure() << msg.str();
}

/// Same shape, dtype and values (NaN == NaN), bit for bit.
inline ::testing::AssertionResult tensors_equal(const at::Tensor& actual,
                                                const at::Tensor& expected) {
  if (actual.scalar_type() != expected.scalar_type()) {
    return ::testing::AssertionFailure()
           << "dtype " << actual.scalar_type() << " != expected " << expected.scalar_type();
  }
  return tensors_close(actual, expected, {0, 0});
}

}  // namespace customop::testing
