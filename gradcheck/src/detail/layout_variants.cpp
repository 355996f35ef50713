#include "detail/layout_variants.h"

#include "detail/compare.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

namespace customop::gradcheck::detail {

namespace {

/// One non-contiguous layout of a tensor.
struct Layout {
  const char* name;       // "strided", "transposed"
  const char* described;  // for messages
};

constexpr Layout kStrided{"strided", "a strided view (every 2nd element of a larger buffer)"};
constexpr Layout kTransposed{"transposed", "a transposed layout (last two dims stored swapped)"};

/// `t`'s values in `layout`; nullopt where the layout does not apply (fewer dims, no
/// elements, or it would be contiguous anyway).
std::optional<at::Tensor> in_layout(const at::Tensor& t, const Layout& layout) {
  if (t.dim() == 0 || t.numel() == 0) return std::nullopt;
  at::Tensor out;
  if (&layout == &kStrided) {
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes.back() *= 2;
    at::Tensor buffer = at::full(sizes, std::numeric_limits<double>::quiet_NaN(), t.options());
    out = buffer.slice(-1, 0, std::nullopt, 2);
  } else {
    if (t.dim() < 2) return std::nullopt;
    out = at::empty_like(t.transpose(-1, -2), at::MemoryFormat::Contiguous).transpose(-1, -2);
  }
  if (out.is_contiguous()) return std::nullopt;
  at::NoGradGuard no_grad;
  out.copy_(t.detach());
  return out;
}

double rounding(c10::ScalarType t) {
  switch (t) {
    case at::kDouble: return std::numeric_limits<double>::epsilon();
    case at::kHalf: return 9.765625e-4;
    case at::kBFloat16: return 7.8125e-3;
    default: return std::numeric_limits<float>::epsilon();
  }
}

/// How far two correct evaluations in different layouts may differ: a reduction over K terms
/// summed in another order rounds differently by up to ~sqrt(K) u |terms| (typically), so
/// 16 u (4 + sqrt(K)) max(1, |result|, |input|), with K the largest input's element count.
struct RoundingScale {
  double reduction = 4;  // 4 + sqrt(K)
  double input = 1;      // max(1, max |input|)
};

/// Empty when `got` equals `want` to rounding (RoundingScale, plus `slack`), else what differs.
std::string differs(const at::Tensor& got, const at::Tensor& want, const RoundingScale& rs,
                    double slack = 0) {
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

class LayoutCheck {
 public:
  LayoutCheck(const Function& f, const Checked& c, std::uint64_t seed, double nondet_tol,
              GradcheckResult& r)
      : f_(f),
        c_(c),
        r_(r),
        gen_(at::make_generator<at::CPUGeneratorImpl>(seed + 3)),
        nondet_tol_(nondet_tol),
        compare_grads_(!r.failed(Check::kReentrancy)) {
    int64_t k = 1;
    for (const auto& l : c_.leaves) {
      k = std::max<int64_t>(k, l.numel());
      if (l.numel() == 0) continue;
      const at::Tensor a = l.detach().abs().to(at::kDouble);
      const at::Tensor finite = at::where(at::isfinite(a), a, at::zeros_like(a));
      rs_.input = std::max(rs_.input, finite.max().item<double>());
    }
    rs_.reduction = 4 + std::sqrt(static_cast<double>(k));
    if (!compare_grads_) {
      r_.notes.emplace_back(
          "layout variants: grads not compared (backward is not reentrant); outputs compared");
    }
  }

  void run() {
    for (auto o : c_.diff) {
      const auto& y = c_.outputs[o];
      ys_.push_back(y);
      const at::Tensor g =
          at::rand(y.sizes(), gen_, at::TensorOptions().dtype(at::kDouble)) * 2 - 1;
      gs_.push_back(g.to(y.options().requires_grad(false)));
    }
    try {
      want_grads_ = vjp(ys_, gs_, c_.leaves, r_.layout_counts);
    } catch (const std::exception&) {
      return;  // the first-order checks report backward errors
    }
    for (std::size_t j = 0; j < c_.leaves.size(); ++j) {
      for (const Layout* layout : {&kStrided, &kTransposed}) input_variant(j, *layout);
    }
    for (std::size_t i = 0; i < ys_.size(); ++i) {
      for (const Layout* layout : {&kStrided, &kTransposed}) grad_output_variant(i, *layout);
    }
  }

 private:
  void input_variant(std::size_t j, const Layout& layout) {
    const std::optional<at::Tensor> x = in_layout(c_.leaves[j], layout);
    if (!x) return;
    const std::string name = f_.input_names[j];
    const std::string what = "input " + std::to_string(j) + " ('" + name + "') as " +
                             layout.described + ", strides " + format_sizes(x->strides());
    r_.layout_variants.push_back(name + ": " + layout.name);
    std::vector<at::Tensor> inputs;
    for (std::size_t k = 0; k < c_.leaves.size(); ++k) {
      inputs.push_back(k == j ? x->requires_grad_(true)
                              : clone_like(c_.leaves[k]).requires_grad_(true));
    }
    std::vector<at::Tensor> outs;
    try {
      at::AutoGradMode grad_mode(true);
      outs = f_.eval(inputs);
    } catch (const std::exception& e) {
      fail(j, -1, "the forward raised an error with " + what,
           "  " + one_line_error(e) + "\n  with the given layout it ran");
      return;
    }
    for (std::size_t o = 0; o < c_.outputs.size() && o < outs.size(); ++o) {
      const std::string d = differs(outs[o], c_.outputs[o], rs_);
      if (d.empty()) continue;
      fail(j, -1,
           "forward output " + std::to_string(o) + " ('" + out_name(o) + "') differs with " + what,
           "  output " + std::to_string(o) + " " + d +
               "\n  a kernel that reads this input's memory as if it were contiguous (data_ptr() "
               "without the strides) does this; call .contiguous() or index with the strides");
      return;
    }
    std::vector<at::Tensor> ys;
    for (auto o : c_.diff) {
      if (o >= outs.size() || !outs[o].requires_grad()) return;  // stability: first order's
      ys.push_back(outs[o]);
    }
    compare_grads(vjp_or_fail(ys, gs_, inputs, j, -1, what), j, -1, what);
  }

  void grad_output_variant(std::size_t i, const Layout& layout) {
    const std::optional<at::Tensor> g = in_layout(gs_[i], layout);
    if (!g) return;
    const std::string out = out_name(c_.diff[i]);
    const std::string what = "the grad_output of output " + std::to_string(i) + " ('" + out +
                             "') as " + layout.described + ", strides " +
                             format_sizes(g->strides());
    r_.layout_variants.push_back("grad_output " + out + ": " + layout.name);
    std::vector<at::Tensor> gs = gs_;
    gs[i] = *g;
    compare_grads(vjp_or_fail(ys_, gs, c_.leaves, -1, static_cast<int>(i), what), -1,
                  static_cast<int>(i), what);
  }

  std::optional<std::vector<at::Tensor>> vjp_or_fail(const std::vector<at::Tensor>& ys,
                                                     const std::vector<at::Tensor>& gs,
                                                     const std::vector<at::Tensor>& xs, int input,
                                                     int output, const std::string& what) {
    try {
      return vjp(ys, gs, xs, r_.layout_counts);
    } catch (const std::exception& e) {
      fail(input, output, "backward raised an error with " + what,
           "  " + one_line_error(e) + "\n  with the given layout it ran");
      return std::nullopt;
    }
  }

  void compare_grads(const std::optional<std::vector<at::Tensor>>& grads, int input, int output,
                     const std::string& what) {
    if (!grads || !compare_grads_) return;
    for (std::size_t k = 0; k < grads->size() && k < want_grads_.size(); ++k) {
      const std::string d = differs((*grads)[k], want_grads_[k], rs_, nondet_tol_);
      if (d.empty()) continue;
      fail(input < 0 ? static_cast<int>(k) : input, output,
           "the grad of input " + std::to_string(k) + " ('" + f_.input_names[k] +
               "') differs with " + what,
           "  grad " + d +
               "\n  a backward that reads this tensor's memory as if it were contiguous "
               "(data_ptr() without the strides) does this; call .contiguous() or index with "
               "the strides");
      return;
    }
  }

  void fail(std::ptrdiff_t input, int output, std::string headline, std::string detail) {
    add_failure(r_, Check::kLayout, false, output, static_cast<int>(input), std::move(headline),
                std::move(detail));
  }

  std::string out_name(std::size_t o) const {
    return o < c_.output_names.size() ? c_.output_names[o] : "output " + std::to_string(o);
  }

  const Function& f_;
  const Checked& c_;
  GradcheckResult& r_;
  at::Generator gen_;
  double nondet_tol_;
  RoundingScale rs_;
  bool compare_grads_;
  std::vector<at::Tensor> ys_, gs_, want_grads_;
};

}  // namespace

void check_layout_variants(const Function& f, const Checked& c, std::uint64_t seed,
                           double nondet_tol, GradcheckResult& result) {
  if (c.diff.empty()) return;
  LayoutCheck(f, c, seed, nondet_tol, result).run();
}

}  // namespace customop::gradcheck::detail
