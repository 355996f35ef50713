#include "detail/compare.h"

#include "detail/function.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace customop::gradcheck::detail {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6e", v);
  return buf;
}

std::string short_sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0e", v);
  return buf;
}

at::Tensor flat_double(const at::Tensor& t) {
  return t.detach().to(at::kCPU, at::kDouble).contiguous().reshape({-1});
}

namespace {

/// max(t), NaN counted as +inf; 0 for an empty t.
double nan_max(const at::Tensor& t) {
  if (t.numel() == 0) return 0.0;
  const at::Tensor clean = at::where(at::isnan(t), at::full_like(t, INFINITY), t);
  return clean.max().item<double>();
}

}  // namespace

BlockCompare compare_block(const at::Tensor& num, const at::Tensor& ana, const at::Tensor& err,
                           const at::Tensor& left, const at::Tensor& right, const Tolerances& tol,
                           bool detect_nd, c10::IntArrayRef out_sizes, c10::IntArrayRef in_sizes) {
  BlockCompare out;
  PairReport& p = out.pair;
  const at::Tensor diff = (ana - num).abs();
  const at::Tensor tolm = tol.atol + tol.rtol * num.abs() + err;
  const at::Tensor bad = (diff <= tolm).logical_not();  // NaN counts as bad
  at::Tensor nd = at::zeros_like(bad);
  if (detect_nd && left.defined()) {
    const at::Tensor jump = (right - left).abs();
    const at::Tensor scale = at::maximum(left.abs(), right.abs());
    nd = bad & (jump > at::maximum(tolm, 0.1 * scale));
  }
  const at::Tensor rel = at::where(num != 0, diff / num.abs(), diff);
  p.entries = num.numel();
  p.bad_entries = bad.sum().item<int64_t>();
  p.nondifferentiable_entries = nd.sum().item<int64_t>();
  p.passed = p.bad_entries == 0;
  p.worst_abs_error = nan_max(diff);
  p.worst_rel_error = nan_max(rel);
  const int64_t cols = num.size(1);
  auto element = [&](int64_t flat) {
    ElementReport e;
    const int64_t r = flat / cols;
    const int64_t c = flat % cols;
    e.output_index = unravel(r, out_sizes);
    e.input_index = unravel(c, in_sizes);
    e.numerical = num[r][c].item<double>();
    e.analytical = ana[r][c].item<double>();
    e.abs_error = diff[r][c].item<double>();
    e.rel_error = rel[r][c].item<double>();
    e.tolerance = tolm[r][c].item<double>();
    return e;
  };
  if (p.entries == 0) return out;
  at::Tensor score = diff / tolm;
  score = at::where(at::isnan(score), at::full_like(score, INFINITY), score);
  // The worst entry: among mismatches that are not at a kink when there are any.
  const at::Tensor plain_bad = bad & nd.logical_not();
  at::Tensor pick = score;
  if (plain_bad.any().item<bool>()) {
    pick = at::where(plain_bad, score, at::full_like(score, -1.0));
  }
  p.worst = element(pick.reshape({-1}).argmax().item<int64_t>());
  if (p.nondifferentiable_entries > 0) {
    out.worst_nd = element(
        at::where(nd, score, at::full_like(score, -1.0)).reshape({-1}).argmax().item<int64_t>());
  }
  return out;
}

std::string describe_worst(const PairReport& p, const std::string& out_name,
                           const std::string& in_name, const Tolerances& tol,
                           const std::string& steps, std::uint64_t seed) {
  std::ostringstream os;
  const auto& w = p.worst;
  os << "  worst element: d " << out_name << format_index(w.output_index) << " / d " << in_name
     << format_index(w.input_index) << ": numerical " << sci(w.numerical) << ", analytical "
     << sci(w.analytical) << ", abs error " << sci(w.abs_error) << ", rel error "
     << sci(w.rel_error) << " (atol " << short_sci(tol.atol) << ", rtol " << short_sci(tol.rtol)
     << ", " << steps << ", seed " << seed << ")\n";
  os << "  bad entries: " << p.bad_entries << " of " << p.entries;
  if (p.nondifferentiable_entries > 0) {
    os << " (" << p.nondifferentiable_entries << " at non-differentiable points)";
  }
  return os.str();
}

}  // namespace customop::gradcheck::detail
