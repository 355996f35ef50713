#include "detail/compare.h"

#include "detail/function.h"
#include "detail/numerical.h"
#include "detail/values.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <vector>

namespace customop::gradcheck::detail {

std::string sci(double v) {
  if (std::isnan(v)) return "nan";  // x86's default NaN has its sign bit set: never "-nan"
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6e", v);
  return buf;
}

std::string short_sci(double v) {
  if (std::isnan(v)) return "nan";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0e", v);
  return buf;
}

at::Tensor flat_double(const at::Tensor& t) {
  if (is_dense_double(t) && t.has_storage()) {
    if (t.dim() == 1 && !t.requires_grad()) return t;
    // detach().reshape({-1}) without two dispatched ops (~9,000 instructions, more than a
    // check's arithmetic on its small vectors): a new TensorImpl over the same storage, with
    // no autograd history and its own version counter (the result is only read).
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        c10::Storage(t.storage()), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    impl->set_sizes_contiguous({t.numel()});
    impl->set_storage_offset(t.storage_offset());
    return at::Tensor(std::move(impl));
  }
  return t.detach().to(at::kCPU, at::kDouble).resolve_neg().contiguous().reshape({-1});
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

/// a, or NaN when a or b is NaN, else the larger: at::maximum's rule.
inline double max_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  return a >= b ? a : b;
}

/// The lower median of row[0..n) (n > 0), NaN when it holds a NaN: torch.median(dim)'s rule.
double lower_median(const double* row, int64_t n, std::vector<double>& scratch) {
  scratch.assign(row, row + n);
  for (const double v : scratch) {
    if (std::isnan(v)) return NAN;
  }
  const auto mid = scratch.begin() + (n - 1) / 2;
  std::nth_element(scratch.begin(), mid, scratch.end());
  return *mid;
}

/// NaN counted as +inf.
inline double nan_as_inf(double v) { return std::isnan(v) ? INFINITY : v; }

}  // namespace

// The comparison runs as loops over the block's float64 entries (detail/values.h: on these
// small blocks each ATen call costs more than its arithmetic). Each entry's arithmetic is the
// element-wise formula below, in the order written, so every bound rounds as the tensor
// expressions it replaced did.
BlockCompare compare_block(const NumericalBlock& nb, const at::Tensor& ana_in, double u_ana,
                           double nondet_tol, const Tolerances& tol, bool detect_nd,
                           c10::IntArrayRef out_sizes, c10::IntArrayRef in_sizes,
                           const at::Tensor& ana_float64) {
  BlockCompare out;
  PairReport& p = out.pair;
  const at::Tensor value = dense_double(nb.value);
  const int64_t rows = value.size(0), cols = value.size(1), count = rows * cols;
  const at::Tensor ana_t = dense_double(ana_in);
  const double* num0 = value.const_data_ptr<double>();
  const double* ana = ana_t.const_data_ptr<double>();
  const at::Tensor err_t = dense_double(nb.error);
  const double* error = err_t.const_data_ptr<double>();
  const bool sides = nb.left.defined();
  at::Tensor left_t, right_t, noise_t;
  const double *left = nullptr, *right = nullptr, *noise = nullptr;
  if (sides) {
    left_t = dense_double(nb.left);
    right_t = dense_double(nb.right);
    left = left_t.const_data_ptr<double>();
    right = right_t.const_data_ptr<double>();
  }
  if (nb.noise.defined()) {
    noise_t = dense_double(nb.noise);
    noise = noise_t.const_data_ptr<double>();
  }
  at::Tensor slack_t;
  const double* side_slack = nullptr;
  if (nb.side_slack.defined()) {
    slack_t = dense_double(nb.side_slack);
    side_slack = slack_t.const_data_ptr<double>();
  }
  at::Tensor refined_t;
  const bool* refined = nullptr;
  if (nb.refined.defined()) {
    refined_t = nb.refined.contiguous();
    refined = refined_t.const_data_ptr<bool>();
  }
  const auto jump_at = [&](int64_t e) { return sides ? std::abs(right[e] - left[e]) : 0.0; };
  const auto scale_at = [&](int64_t e) {
    return sides ? max_nan(std::abs(left[e]), std::abs(right[e])) : std::abs(num0[e]);
  };

  // Per entry: the numerical value judged, its error estimate, the analytical rounding bound,
  // the kink flag, |ana - num|, the tolerance.
  std::vector<double> num(num0, num0 + count), estimate(count), rounding(count, 0.0), diff(count),
      rel(count);
  std::vector<uint8_t> kink(count), bad(count), nd(count, 0);
  // The analytical bound from the entry's own row and column (compare.h), and its terms' size.
  std::vector<double> own_rounding(count, 0.0), row_max(static_cast<std::size_t>(rows), 0.0),
      col_max(static_cast<std::size_t>(cols), 0.0);
  const auto own_scale = [&](int64_t e) { return std::max(row_max[e / cols], col_max[e % cols]); };
  std::vector<double> judged64;  // per entry: the float64 analytical value that failed it, or NaN
  int64_t largest_row = 0;       // the row of the block's largest |ana|
  at::Tensor tolm_t = at::empty({rows, cols}, at::kDouble);
  double* tolm = tolm_t.mutable_data_ptr<double>();
  if (tol.estimated) {
    constexpr double S = kEstimateSafety;
    // The spread of each row's one-sided differences: the median over its entries.
    std::vector<double> pooled(static_cast<std::size_t>(rows), 0.0), half_row, scratch;
    for (int64_t r = 0; r < rows && cols > 0; ++r) {
      half_row.resize(static_cast<std::size_t>(cols));
      for (int64_t c = 0; c < cols; ++c) half_row[c] = jump_at(r * cols + c) / 2;
      pooled[r] = lower_median(half_row.data(), cols, scratch);
    }
    // The backward's rounding scales with its intermediate terms, which can cancel to an
    // entry far smaller than them (float32 tanh's 1 - y^2 at x = 6 is ~2e-5 from terms ~1): the
    // largest entry of the block stands in for their size, and of the entry's row and column
    // for a tighter bound (compare.h: entries within the first only are judged in float64).
    // (NaN and inf entries fail on their own; they do not widen the others' bounds.)
    double block_max = 0;
    for (int64_t e = 0; e < count; ++e) {
      const double a = std::abs(ana[e]);
      if (!std::isfinite(a)) continue;
      if (a > block_max) largest_row = e / cols;
      block_max = std::max(block_max, a);
      row_max[e / cols] = std::max(row_max[e / cols], a);
      col_max[e % cols] = std::max(col_max[e % cols], a);
    }
    // Ridders' tableau combines differences with weights whose magnitudes add up to about
    // ((c^2 + 1) / (c^2 - 1))^3 ~ 4.6 for c = 2 over three orders: rounding noise at the
    // smallest step grows by that much in the extrapolated value.
    const double amplification = nb.extrapolated ? 5.0 : 1.0;
    const double weight = noise_weight(nb.extrapolated);
    const double round_scale = S * 16 * u_ana;
    const double floor = S * subnormal_spacing_of(u_ana);
    for (int64_t e = 0; e < count; ++e) {
      // An infinite entry fails on its own: it does not widen its own bound to infinity either
      // (a float32 prod that overflowed to inf, with grads +-inf, passed).
      const double a = std::isfinite(ana[e]) ? std::abs(ana[e]) : 0.0;
      rounding[e] = round_scale * (a + block_max) + nondet_tol + floor;
      own_rounding[e] = round_scale * (a + own_scale(e)) + nondet_tol + floor;
      if (refined != nullptr && refined[e]) {
        kink[e] = 0;
        estimate[e] = S * (error[e] + weight * (noise ? noise[e] : 0.0));
        continue;
      }
      const double half = jump_at(e) / 2;
      const double rest =
          S * (error[e] + amplification * pooled[e / cols] + weight * (noise ? noise[e] : 0.0) +
               (side_slack != nullptr ? side_slack[e] : 0.0));
      kink[e] = jump_at(e) > 0.1 * scale_at(e) + rest + rounding[e];
      const double smooth = nb.extrapolated ? 0.0 : half;
      if (detect_nd && sides) {
        // At a kink: the values between the one-sided derivatives, around their midpoint (the
        // central difference at the smallest step; an extrapolation across a kink means
        // nothing).
        if (kink[e]) num[e] = (left[e] + right[e]) / 2;
        estimate[e] = (kink[e] ? half : smooth) + rest;
      } else {
        // At a kink without detection, the central difference alone judges (torch's
        // behaviour).
        estimate[e] = (kink[e] ? 0.0 : smooth) + rest;
      }
    }
  } else {
    (void)nondet_tol;  // the fixed rule, as torch's: nondet_tol judges reentrancy only
    for (int64_t e = 0; e < count; ++e) {
      estimate[e] = error[e];
      kink[e] = jump_at(e) >
                max_nan(tol.atol + tol.rtol * std::abs(num[e]) + error[e], 0.1 * scale_at(e));
    }
  }
  for (int64_t e = 0; e < count; ++e) {
    diff[e] = std::abs(ana[e] - num[e]);
    tolm[e] = (tol.estimated ? estimate[e] : tol.atol + tol.rtol * std::abs(num[e]) + estimate[e]) +
              rounding[e];
    bad[e] = !(diff[e] <= tolm[e]);  // NaN counts as bad
    nd[e] = detect_nd && sides && bad[e] && kink[e];
    rel[e] = num[e] != 0 ? diff[e] / std::abs(num[e]) : diff[e];
  }
  // Entries that pass by the block's rounding bound only (compare.h), judged by the backward
  // run in float64 where it was given, else listed by row.
  if (tol.estimated && u_ana > unit_roundoff(at::kDouble)) {
    at::Tensor ana64_t;
    const double* ana64 = nullptr;
    if (ana_float64.defined()) {
      ana64_t = dense_double(ana_float64);
      ana64 = ana64_t.const_data_ptr<double>();
      judged64.assign(static_cast<std::size_t>(count), NAN);
      // A run that computes in float32 returns float32 numbers (a float64 one does with
      // probability ~2^-29 per value, beyond 0 and small dyadic ones).
      bool float64 = false;
      for (int64_t e = 0; e < count && !float64; ++e) {
        const double a = ana64[e];
        float64 = std::isfinite(a) && a != 0 && static_cast<double>(static_cast<float>(a)) != a;
      }
      if (!float64) {
        out.float64_in_float32 = true;
        ana64 = nullptr;
        judged64.clear();
      }
    }
    const double round_scale64 = kEstimateSafety * 16 * unit_roundoff(at::kDouble);
    const double floor64 = kEstimateSafety * subnormal_spacing(at::kDouble);
    for (int64_t e = 0; e < count; ++e) {
      if (bad[e] || kink[e] || diff[e] <= estimate[e] + own_rounding[e]) continue;
      if (!ana_float64.defined()) {
        out.rounding_only_rows.push_back(e / cols);
        continue;
      }
      if (ana64 == nullptr) continue;
      const double a64 = ana64[e];
      if (!std::isfinite(a64)) continue;
      // It fails where the float64 backward fails the entry too (to float64's bound from its
      // row and column) and the float32 value sides with it: within half their distance to
      // the numerical value. A float64 backward that is right leaves the float32 value's
      // distance to its rounding; one that is itself imprecise (ATen's tanh-approximated gelu
      // at x ~ -6 is off by ~5e-12) does not fail a float32 value that is not as far off.
      const double off64 = std::abs(a64 - num[e]);
      const double bound64 = round_scale64 * (std::abs(a64) + own_scale(e)) + nondet_tol + floor64;
      if (!(off64 > estimate[e] + bound64 && std::abs(ana[e] - a64) <= off64 / 2)) continue;
      bad[e] = 1;
      out.float64_failed.push_back(e);
      judged64[e] = a64;
      rounding[e] = own_rounding[e];
      tolm[e] = estimate[e] + own_rounding[e];
    }
    auto& r = out.rounding_only_rows;
    if (!r.empty()) r.push_back(largest_row);
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
  }
  p.entries = count;
  p.bad_entries = std::count(bad.begin(), bad.end(), uint8_t{1});
  p.nondifferentiable_entries = std::count(nd.begin(), nd.end(), uint8_t{1});
  if (detect_nd && sides && tol.estimated) {
    at::Tensor inputs = at::zeros({cols}, at::kBool);
    bool* flag = inputs.mutable_data_ptr<bool>();
    for (int64_t e = 0; e < count; ++e) {
      if (kink[e] && !bad[e]) {
        ++p.kink_entries;
        flag[e % cols] = true;
      }
    }
    if (p.kink_entries > 0) p.kink_inputs = inputs;
  }
  if (tol.estimated && cols > 0) {
    for (int64_t r = 0; r < rows; ++r) {
      double row_scale = -INFINITY;  // max |num| of the row, NaN if any
      for (int64_t c = 0; c < cols; ++c)
        row_scale = max_nan(row_scale, std::abs(num[r * cols + c]));
      // NB: an entry whose differences are all exactly zero (the output does not move with
      // that input) and whose analytical value is exactly zero was not accepted loosely,
      // whatever the rounding estimate: a row of such entries has no scale to be 1 % of.
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t e = r * cols + c;
        const bool loose = estimate[e] > 0.01 * row_scale && !(num[e] == 0 && ana[e] == 0);
        p.loose_entries += loose;
        // NB: not failing entries that are not loose. Sampling those again too passed softsign
        // within 2e-7 of 0 (f'' jumps there), but also let float64 backwards computed in float32
        // through (relu(x) + sin(x) with an element 1e-5 from 0: 4 of 4 samples caught without
        // it, 1 with it).
        if (loose && !nb.extrapolated && sides && (refined == nullptr || !refined[e]))
          out.loose_columns.push_back(c);
      }
    }
    std::sort(out.loose_columns.begin(), out.loose_columns.end());
    out.loose_columns.erase(std::unique(out.loose_columns.begin(), out.loose_columns.end()),
                            out.loose_columns.end());
  }
  p.passed = p.bad_entries == 0;
  p.worst_abs_error = 0;
  p.worst_rel_error = 0;
  for (int64_t e = 0; e < count; ++e) {
    p.worst_abs_error = std::max(p.worst_abs_error, nan_as_inf(diff[e]));
    p.worst_rel_error = std::max(p.worst_rel_error, nan_as_inf(rel[e]));
  }
  if (count == 0) {
    p.worst_abs_error = p.worst_rel_error = 0;
  }
  p.tolerance = tolm_t;
  auto element = [&](int64_t flat) {
    ElementReport e;
    e.output_index = unravel(flat / cols, out_sizes);
    e.input_index = unravel(flat % cols, in_sizes);
    e.numerical = num[flat];
    e.analytical = ana[flat];
    e.abs_error = diff[flat];
    e.rel_error = rel[flat];
    e.tolerance = tolm[flat];
    e.error_estimate = estimate[flat];
    e.rounding_bound = rounding[flat];
    if (!judged64.empty()) e.float64_analytical = judged64[flat];
    return e;
  };
  if (p.entries == 0) return out;
  // The worst entry (the first of the largest diff / tolerance, NaN as +inf): among mismatches
  // that are not at a kink when there are any.
  const auto score = [&](int64_t e) { return nan_as_inf(diff[e] / tolm[e]); };
  const auto first_max = [&](auto&& pick) {
    int64_t best = 0;
    double top = pick(0);
    for (int64_t e = 1; e < count; ++e) {
      const double v = pick(e);
      if (v > top) {
        top = v;
        best = e;
      }
    }
    return best;
  };
  bool any_plain_bad = false;
  for (int64_t e = 0; e < count && !any_plain_bad; ++e) any_plain_bad = bad[e] && !nd[e];
  p.worst = element(
      first_max([&](int64_t e) { return !any_plain_bad || (bad[e] && !nd[e]) ? score(e) : -1.0; }));
  if (p.nondifferentiable_entries > 0) {
    out.worst_nd = element(first_max([&](int64_t e) { return nd[e] ? score(e) : -1.0; }));
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
  if (!std::isnan(w.float64_analytical)) {
    os << "  the backward run in float64 gives " << sci(w.float64_analytical)
       << ", as far from the numerical value: the formula is off, not its rounding (the bound "
          "above is set by this entry's row and column)\n";
  }
  os << "  bad entries: " << p.bad_entries << " of " << p.entries;
  if (p.nondifferentiable_entries > 0) {
    os << " (" << p.nondifferentiable_entries << " at non-differentiable points)";
  }
  return os.str();
}

}  // namespace customop::gradcheck::detail
