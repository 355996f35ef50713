#include "detail/numerical.h"

#include "detail/values.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <sstream>

namespace customop::gradcheck::detail {

double unit_roundoff(c10::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return std::ldexp(1.0, -24);
    case at::kHalf: return std::ldexp(1.0, -11);
    case at::kBFloat16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -53);
  }
}

double subnormal_spacing(c10::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return std::ldexp(1.0, -149);
    case at::kHalf: return std::ldexp(1.0, -24);
    case at::kBFloat16: return std::ldexp(1.0, -133);
    default: return std::ldexp(1.0, -1074);
  }
}

double smallest_normal(c10::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
    case at::kBFloat16: return std::ldexp(1.0, -126);
    case at::kHalf: return std::ldexp(1.0, -14);
    default: return std::ldexp(1.0, -1022);
  }
}

Estimate ridders_extrapolate(const std::vector<at::Tensor>& samples, double shrink) {
  TORCH_INTERNAL_ASSERT(!samples.empty());
  if (samples.size() == 1) return {samples[0], at::zeros_like(samples[0])};
  constexpr double kSafe = 2.0;  // NR's SAFE: stop once the error grows by this factor
  const double con2 = shrink * shrink;
  std::vector<std::vector<at::Tensor>> a(samples.size());
  at::Tensor best = samples[0];
  at::Tensor err = at::full_like(samples[0], std::numeric_limits<double>::infinity());
  at::Tensor active = at::ones_like(samples[0], at::kBool);
  a[0].push_back(samples[0]);
  for (std::size_t i = 1; i < samples.size(); ++i) {
    a[i].push_back(samples[i]);
    double fac = con2;
    for (std::size_t k = 1; k <= i; ++k) {
      // Neville step: removes the h^(2k) term, the central difference's error being even in h.
      at::Tensor ak = (a[i][k - 1] * fac - a[i - 1][k - 1]) / (fac - 1.0);
      fac *= con2;
      at::Tensor errt = at::maximum((ak - a[i][k - 1]).abs(), (ak - a[i - 1][k - 1]).abs());
      at::Tensor better = active & (errt <= err);
      best = at::where(better, ak, best);
      err = at::where(better, errt, err);
      a[i].push_back(ak);
    }
    at::Tensor grew = (a[i][i] - a[i - 1][i - 1]).abs() >= err * kSafe;
    active = active & grew.logical_not();
  }
  err = at::where(at::isfinite(err), err, at::zeros_like(err));
  return {best, err};
}

std::pair<double, double> ridders_extrapolate(const std::vector<double>& samples, double shrink) {
  TORCH_INTERNAL_ASSERT(!samples.empty());
  if (samples.size() == 1) return {samples[0], 0.0};
  std::vector<at::Tensor> levels;
  levels.reserve(samples.size());
  for (const double x : samples) levels.push_back(at::scalar_tensor(x, at::kDouble));
  const Estimate e = ridders_extrapolate(levels, shrink);
  return {e.value.item<double>(), e.error.item<double>()};
}

Numerical::Numerical(const Function& f, const std::vector<at::Tensor>& point, bool reference,
                     StepRule rule, std::vector<at::Tensor> base)
    : f_(f), reference_(reference), rule_(rule) {
  at::NoGradGuard no_grad;
  for (const auto& p : point) {
    work_.push_back(
        clone_like(p, reference ? std::optional<c10::ScalarType>(at::kDouble) : std::nullopt));
    values_.push_back(p.detach().to(at::kCPU, at::kDouble).contiguous().reshape({-1}));
  }
  base_ = base.empty() ? (reference_ ? f_.eval_reference(work_) : f_.eval(work_)) : std::move(base);
  rows_.reserve(base_.size());
  std::vector<at::Tensor> roundoff;
  for (const auto& o : base_) {
    const int64_t n = o.defined() && at::isFloatingType(o.scalar_type()) ? o.numel() : 0;
    rows_.emplace_back(total_, total_ + n);
    total_ += n;
    if (n > 0) roundoff.push_back(at::full({n}, unit_roundoff(o.scalar_type()), at::kDouble));
  }
  base_flat_ = concat(base_);
  row_u_ = roundoff.empty() ? at::zeros({0}, at::kDouble) : at::cat(roundoff);
}

at::Tensor Numerical::concat(const std::vector<at::Tensor>& outs) const {
  std::vector<at::Tensor> parts;
  for (std::size_t o = 0; o < outs.size(); ++o) {
    if (rows_[o].first == rows_[o].second) continue;
    parts.push_back(outs[o]);
  }
  if (parts.empty()) return at::zeros({0}, at::kDouble);
  // One float64 CPU contiguous output (the common case): a plain copy, no dispatch. A copy,
  // not the output itself: an output may alias an input that the next perturbation changes.
  if (parts.size() == 1 && is_dense_double(parts[0])) {
    const int64_t n = parts[0].numel();
    const double* src = parts[0].const_data_ptr<double>();
    return tabulate(n, [&](int64_t k) { return src[k]; });
  }
  for (auto& part : parts)
    part = part.detach().to(at::kCPU, at::kDouble).contiguous().reshape({-1});
  return at::cat(parts);
}

std::string Numerical::perturbation(std::size_t j, double h, int64_t k) const {
  const std::string input = j < input_names_.size() ? input_names_[j] : std::to_string(j);
  std::ostringstream os;
  os << "input " << j << " ('" << input << "') was perturbed ";
  if (k >= 0) {
    os << "at element " << format_index(unravel(k, work_[j].sizes()));
  } else {
    os << "along a random direction";
  }
  os << " by " << h;
  return os.str();
}

at::Tensor Numerical::evaluate(std::size_t j, double h, int64_t k) {
  auto outs = reference_ ? f_.eval_reference(work_) : f_.eval(work_);
  auto describe = [](const at::Tensor& t) {
    if (!t.defined()) return std::string("None");
    std::ostringstream os;
    os << format_sizes(t.sizes()) << " " << dtype_name(t.scalar_type());
    return os.str();
  };
  if (outs.size() != base_.size()) {
    std::ostringstream os;
    os << "the number of outputs changed from " << base_.size() << " to " << outs.size() << " when "
       << perturbation(j, h, k);
    throw UnstableOutputs(os.str());
  }
  for (std::size_t o = 0; o < outs.size(); ++o) {
    const auto& a = base_[o];
    const auto& b = outs[o];
    const bool same =
        a.defined() == b.defined() &&
        (!a.defined() || (a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type()));
    if (!same) {
      std::ostringstream os;
      os << "output " << o << " changed from " << describe(a) << " to " << describe(b) << " when "
         << perturbation(j, h, k);
      throw UnstableOutputs(os.str());
    }
  }
  return concat(outs);
}

at::Tensor Numerical::evaluate_moved(const std::vector<at::Tensor>& d, double t) {
  at::NoGradGuard no_grad;
  TORCH_INTERNAL_ASSERT(d.size() == work_.size(), "evaluate_moved: ", d.size(), " directions for ",
                        work_.size(), " inputs");
  const auto restore = [&] {
    for (std::size_t j = 0; j < work_.size(); ++j)
      work_[j].copy_(values_[j].view(work_[j].sizes()));
  };
  for (std::size_t j = 0; j < work_.size(); ++j) {
    work_[j].copy_((values_[j] + t * d[j]).view(work_[j].sizes()));
  }
  at::Tensor out;
  try {
    out = evaluate(0, t, -1);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return out;
}

namespace {

/// acc += sign * t (t float64 CPU contiguous, of acc's length).
void add_to(std::vector<double>& acc, const at::Tensor& t, double sign) {
  const auto v = values_of(t);
  TORCH_INTERNAL_ASSERT(v.size() == acc.size());
  for (std::size_t k = 0; k < acc.size(); ++k) acc[k] += sign * v[k];
}

}  // namespace

void Numerical::add_level(Sampled& s, int l, const at::Tensor& fp, const at::Tensor& fm, double h,
                          double width, at::Tensor w) const {
  const auto vp = values_of(fp), vm = values_of(fm);
  if (l == 0) s.first_raw = tabulate(total_, [&](int64_t r) { return vp[r] - vm[r]; });
  if (l + 1 == rule_.levels) {
    s.width = width;
    const auto u = values_of(row_u_);
    s.noise = tabulate(
        total_, [&](int64_t r) { return u[r] * (std::abs(vp[r]) + std::abs(vm[r])) / width; });
  }
  s.levels.push_back(
      {tabulate(total_, [&](int64_t r) { return (vp[r] - vm[r]) / (2.0 * h); }), std::move(w)});
}

at::Tensor Numerical::one_sided(std::span<const double> hi, std::span<const double> lo,
                                double step) const {
  return tabulate(total_, [&](int64_t r) { return (hi[r] - lo[r]) / step; });
}

namespace {

/// Writes elements of a CPU work tensor of a floating dtype through its storage, without a
/// dispatch per element: each value rounded as fill_ and copy_ round it (c10::Scalar's
/// conversion), and returned as stored. Other tensors (another device, dtype) are not direct:
/// the callers take ATen ops there.
class StorageWriter {
 public:
  explicit StorageWriter(at::Tensor& t)
      : t_(t),
        direct_(t.device().is_cpu() &&
                (t.scalar_type() == at::kDouble || t.scalar_type() == at::kFloat ||
                 t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16)) {}
  bool direct() const { return direct_; }
  /// Element `offset` of the storage (in elements) = v rounded; returns the stored value.
  double set(int64_t offset, double v) {
    void* base = t_.storage().mutable_data();
    switch (t_.scalar_type()) {
      case at::kDouble: return store<double>(base, offset, v);
      case at::kFloat: return store<float>(base, offset, v);
      case at::kHalf: return store<c10::Half>(base, offset, v);
      default: return store<c10::BFloat16>(base, offset, v);
    }
  }
  /// After a batch of set(): the version counter moves as fill_'s and copy_'s would.
  void done() { t_.unsafeGetTensorImpl()->bump_version(); }

 private:
  template <class T>
  static double store(void* base, int64_t offset, double v) {
    T* p = static_cast<T*>(base) + offset;
    *p = c10::Scalar(v).to<T>();
    return static_cast<double>(*p);
  }
  at::Tensor& t_;
  bool direct_;
};

/// One element of a work tensor: StorageWriter where it is direct, else a 0-d view's fill_ and
/// item.
class ElementSlot {
 public:
  ElementSlot(at::Tensor& t, int64_t offset) : writer_(t), offset_(offset) {
    if (!writer_.direct()) view_ = t.as_strided({}, {}, offset);
  }
  /// Writes v (rounded to the tensor's dtype) and returns the value as stored.
  double set(double v) {
    if (!writer_.direct()) {
      view_.fill_(v);
      return view_.item<double>();
    }
    const double stored = writer_.set(offset_, v);
    writer_.done();
    return stored;
  }

 private:
  StorageWriter writer_;
  int64_t offset_;
  at::Tensor view_;
};

}  // namespace

Sampled Numerical::sample_element(std::size_t j, int64_t k, double step) {
  at::NoGradGuard no_grad;
  at::Tensor& t = work_[j];
  const auto index = unravel(k, t.sizes());
  int64_t offset = t.storage_offset();
  for (std::size_t d = 0; d < index.size(); ++d)
    offset += index[d] * t.stride(static_cast<int64_t>(d));
  ElementSlot elem(t, offset);
  const double x = values_of(values_[j])[static_cast<std::size_t>(k)];
  Sampled s;
  at::Tensor fp, fm;
  double dp = 0, dm = 0;
  for (int l = 0; l < rule_.levels; ++l) {
    const double h = rule_.ridders
                         ? rule_.initial * std::max(1.0, std::abs(x)) / std::pow(rule_.shrink, l)
                         : (step > 0 ? step : rule_.eps);
    // An infinite element does not move (inf + h is inf): no perturbation, numerical 0.
    const double xp = elem.set(x + h);
    dp = std::isfinite(x) ? xp - x : 0.0;
    fp = evaluate(j, h, k);
    const double xm = elem.set(x - h);
    dm = std::isfinite(x) ? x - xm : 0.0;
    fm = evaluate(j, h, k);
    elem.set(x);
    add_level(s, l, fp, fm, h, dp + dm > 0 ? dp + dm : 2.0 * h,
              at::scalar_tensor((dp + dm) / (2.0 * h), at::kDouble));
  }
  s.right = dp > 0 ? one_sided(values_of(fp), values_of(base_flat_), dp) : s.levels.back().diff;
  s.left = dm > 0 ? one_sided(values_of(base_flat_), values_of(fm), dm) : s.levels.back().diff;
  return s;
}

Sampled Numerical::sample_direction(std::size_t j, const at::Tensor& u) {
  at::NoGradGuard no_grad;
  at::Tensor& t = work_[j];
  const at::Tensor& x = values_[j];
  const auto sizes = t.sizes().vec();
  const double scale = rule_.ridders
                           ? std::max(1.0, x.numel() ? x.abs().max().item<double>() : 0.0) *
                                 std::sqrt(static_cast<double>(std::max<int64_t>(1, x.numel())))
                           : 1.0;
  auto read = [&] { return t.to(at::kCPU, at::kDouble).contiguous().reshape({-1}); };
  const int64_t n = x.numel();
  const auto xv = values_of(x), uv = values_of(u);
  TORCH_INTERNAL_ASSERT(uv.size() == xv.size(), "sample_direction: a direction of ", uv.size(),
                        " elements for input ", j, " of ", xv.size());
  StorageWriter writer(t);
  const bool direct = writer.direct() && t.is_contiguous();
  Sampled s;
  at::Tensor fp, fm;
  double h = 0;
  for (int l = 0; l < rule_.levels; ++l) {
    h = rule_.ridders ? rule_.initial * scale / std::pow(rule_.shrink, l) : rule_.eps;
    // The perturbation as applied, (x + h u) - (x - h u) rounded to the input's dtype, read
    // back before the work tensor changes (read() may be a view of it).
    std::vector<double> applied(static_cast<std::size_t>(n));
    if (direct) {  // a contiguous CPU work tensor: written through its storage
      const int64_t at0 = t.storage_offset();
      for (int64_t k = 0; k < n; ++k) applied[k] = writer.set(at0 + k, xv[k] + h * uv[k]);
      writer.done();
      fp = evaluate(j, h, -1);
      for (int64_t k = 0; k < n; ++k) applied[k] -= writer.set(at0 + k, xv[k] - h * uv[k]);
      writer.done();
      fm = evaluate(j, h, -1);
      for (int64_t k = 0; k < n; ++k) writer.set(at0 + k, xv[k]);
      writer.done();
    } else {
      t.copy_(tabulate(n, [&](int64_t k) { return xv[k] + h * uv[k]; }).view(sizes));
      add_to(applied, read(), 1.0);
      fp = evaluate(j, h, -1);
      t.copy_(tabulate(n, [&](int64_t k) { return xv[k] - h * uv[k]; }).view(sizes));
      add_to(applied, read(), -1.0);
      fm = evaluate(j, h, -1);
      t.copy_(x.view(sizes));
    }
    for (auto& a : applied) a = std::isfinite(a) ? a : 0.0;  // infinite elements do not move
    add_level(s, l, fp, fm, h, 2.0 * h,
              tabulate(n, [&](int64_t k) { return applied[k] / (2.0 * h); }));
  }
  s.right = one_sided(values_of(fp), values_of(base_flat_), h);
  s.left = one_sided(values_of(base_flat_), values_of(fm), h);
  return s;
}

}  // namespace customop::gradcheck::detail
