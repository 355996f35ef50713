#include "detail/compare.h"

#include "detail/function.h"
#include "detail/numerical.h"

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

/// The weight of the rounding model r: 16 for one step (cancellation inside the op's own
/// reductions makes its rounding exceed u |f|); 1 with Ridders, whose r is taken at the
/// smallest of its steps, where it is largest (the extrapolated value leans on larger ones).
double noise_weight(bool extrapolated) { return extrapolated ? 1.0 : 16.0; }

/// The subnormal spacing (numerical.h) of the dtype whose unit roundoff is `u`: a backward
/// whose exact value lies below the normal range (a float32 product of 125 factors ~0.4,
/// exactly ~1e-54) is resolved to that, and may be 0.
double subnormal_spacing_of(double u) {
  for (const auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    if (u == unit_roundoff(dtype)) return subnormal_spacing(dtype);
  }
  return subnormal_spacing(at::kDouble);
}

/// max(t), NaN counted as +inf; 0 for an empty t.
double nan_max(const at::Tensor& t) {
  if (t.numel() == 0) return 0.0;
  const at::Tensor clean = at::where(at::isnan(t), at::full_like(t, INFINITY), t);
  return clean.max().item<double>();
}

}  // namespace

BlockCompare compare_block(const NumericalBlock& nb, const at::Tensor& ana, double u_ana,
                           double nondet_tol, const Tolerances& tol, bool detect_nd,
                           c10::IntArrayRef out_sizes, c10::IntArrayRef in_sizes) {
  BlockCompare out;
  PairReport& p = out.pair;
  at::Tensor num = nb.value;
  const bool sides = nb.left.defined();
  const at::Tensor jump = sides ? (nb.right - nb.left).abs() : at::zeros_like(num);
  const at::Tensor scale = sides ? at::maximum(nb.left.abs(), nb.right.abs()) : num.abs();
  at::Tensor estimate, rounding, kink;
  if (tol.estimated) {
    constexpr double S = kEstimateSafety;
    const at::Tensor half = jump / 2;
    const at::Tensor pooled = num.size(1) > 0 ? std::get<0>(half.median(1, /*keepdim=*/true))
                                              : at::zeros({num.size(0), 1}, at::kDouble);
    const at::Tensor noise = nb.noise.defined() ? nb.noise : at::zeros_like(num);
    // The backward's rounding scales with its intermediate terms, which can cancel to an
    // entry far smaller than them (gelu's derivative at x = -3 is ~1e-4 from terms ~1): the
    // largest entry of the block stands in for their size.
    // (NaN and inf entries fail on their own; they do not widen the others' bounds.)
    const at::Tensor block_max = ana.numel() > 0 ? at::nan_to_num(ana.abs(), 0.0, 0.0, 0.0).max()
                                                 : at::zeros({}, at::kDouble);
    // Ridders' tableau combines differences with weights whose magnitudes add up to about
    // ((c^2 + 1) / (c^2 - 1))^3 ~ 4.6 for c = 2 over three orders: rounding noise at the
    // smallest step grows by that much in the extrapolated value.
    const double amplification = nb.extrapolated ? 5.0 : 1.0;
    const at::Tensor rest =
        S * (nb.error + amplification * pooled + noise_weight(nb.extrapolated) * noise);
    rounding =
        S * 16 * u_ana * (ana.abs() + block_max) + nondet_tol + S * subnormal_spacing_of(u_ana);
    kink = jump > 0.1 * scale + rest + rounding;
    const at::Tensor smooth = nb.extrapolated ? at::zeros_like(half) : half;
    if (detect_nd && sides) {
      // At a kink: the values between the one-sided derivatives, around their midpoint (the
      // central difference at the smallest step; an extrapolation across a kink means nothing).
      num = at::where(kink, (nb.left + nb.right) / 2, num);
      estimate = at::where(kink, half, smooth) + rest;
    } else {
      // At a kink without detection, the central difference alone judges (torch's behaviour).
      estimate = at::where(kink, at::zeros_like(half), smooth) + rest;
    }
  } else {
    estimate = nb.error;
    rounding = at::zeros_like(num);
    (void)nondet_tol;  // the fixed rule, as torch's: nondet_tol judges reentrancy only
    kink = jump > at::maximum(tol.atol + tol.rtol * num.abs() + nb.error, 0.1 * scale);
  }
  const at::Tensor diff = (ana - num).abs();
  const at::Tensor tolm =
      (tol.estimated ? estimate : tol.atol + tol.rtol * num.abs() + estimate) + rounding;
  const at::Tensor bad = (diff <= tolm).logical_not();  // NaN counts as bad
  const at::Tensor nd = detect_nd && sides ? bad & kink : at::zeros_like(bad);
  const at::Tensor rel = at::where(num != 0, diff / num.abs(), diff);
  p.entries = num.numel();
  p.bad_entries = bad.sum().item<int64_t>();
  p.nondifferentiable_entries = nd.sum().item<int64_t>();
  p.kink_entries =
      detect_nd && sides && tol.estimated ? (kink & bad.logical_not()).sum().item<int64_t>() : 0;
  if (p.kink_entries > 0) p.kink_inputs = (kink & bad.logical_not()).any(0).cpu();
  if (tol.estimated && num.size(1) > 0) {
    const at::Tensor row_scale = std::get<0>(num.abs().max(1, /*keepdim=*/true));
    p.loose_entries = (estimate > 0.01 * row_scale).sum().item<int64_t>();
  }
  p.passed = p.bad_entries == 0;
  p.worst_abs_error = nan_max(diff);
  p.worst_rel_error = nan_max(rel);
  p.tolerance = tolm;
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
    e.error_estimate = estimate[r][c].item<double>();
    e.rounding_bound = rounding[r][c].item<double>();
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

ProjectionBound projection_bound(double numerical, double extrapolation_error, double half_spread,
                                 double noise, double ana_scale, double u_ana, double nondet_slack,
                                 bool extrapolated, const Tolerances& tol) {
  ProjectionBound b;
  if (tol.estimated) {
    constexpr double S = kEstimateSafety;
    b.estimate = half_spread + S * (extrapolation_error + noise_weight(extrapolated) * noise);
    b.rounding = S * 16 * u_ana * ana_scale + nondet_slack + S * subnormal_spacing_of(u_ana);
  } else {
    b.estimate = tol.atol + tol.rtol * std::abs(numerical) + extrapolation_error;
  }
  b.tolerance = b.estimate + b.rounding;
  return b;
}

PairReport projection_report(double numerical, double analytical, const ProjectionBound& bound) {
  PairReport p;
  p.projected = true;
  p.entries = 1;
  const double abs_err = std::abs(numerical - analytical);
  p.passed = abs_err <= bound.tolerance;
  p.bad_entries = p.passed ? 0 : 1;
  p.worst_abs_error = abs_err;
  p.worst_rel_error = numerical != 0 ? abs_err / std::abs(numerical) : abs_err;
  p.worst.numerical = numerical;
  p.worst.analytical = analytical;
  p.worst.abs_error = abs_err;
  p.worst.rel_error = p.worst_rel_error;
  p.worst.tolerance = bound.tolerance;
  p.worst.error_estimate = bound.estimate;
  p.worst.rounding_bound = bound.rounding;
  return p;
}

std::string describe_worst(const PairReport& p, const std::string& out_name,
                           const std::string& in_name, const Tolerances& tol,
                           const std::string& steps, std::uint64_t seed) {
  std::ostringstream os;
  const auto& w = p.worst;
  os << "  worst element: d " << out_name << format_index(w.output_index) << " / d " << in_name
     << format_index(w.input_index) << ": numerical " << sci(w.numerical);
  if (tol.estimated) os << " (error estimate " << sci(w.error_estimate) << ")";
  os << ", analytical " << sci(w.analytical);
  if (tol.estimated) os << " (rounding bound " << sci(w.rounding_bound) << ")";
  os << ", abs error " << sci(w.abs_error) << ", rel error " << sci(w.rel_error) << " (tolerance "
     << sci(w.tolerance);
  if (tol.estimated) {
    os << " from error estimates, safety " << kEstimateSafety;
  } else {
    os << " = atol " << short_sci(tol.atol) << " + rtol " << short_sci(tol.rtol) << " |numerical|";
  }
  os << "; " << steps << ", seed " << seed << ")\n";
  os << "  bad entries: " << p.bad_entries << " of " << p.entries;
  if (p.nondifferentiable_entries > 0) {
    os << " (" << p.nondifferentiable_entries << " at non-differentiable points)";
  }
  return os.str();
}

}  // namespace customop::gradcheck::detail
