#include "detail/layout_variants.h"

#include "detail/compare.h"
#include "detail/draws.h"
#include "detail/equal_to_rounding.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

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

class LayoutCheck {
 public:
  LayoutCheck(const Function& f, const Checked& c, std::uint64_t seed, double nondet_tol,
              GradcheckResult& r, const JacobianAt& jacobian_at)
      : jacobian_at_(jacobian_at),
        f_(f),
        c_(c),
        r_(r),
        gen_(cpu_generator(seed + 3)),
        nondet_tol_(nondet_tol),
        rs_(rounding_scale(c.leaves)),
        compare_grads_(!r.failed(Check::kReentrancy)) {
    if (!compare_grads_) {
      r_.notes.emplace_back(
          "layout variants: grads not compared (backward is not reentrant); outputs compared");
    }
  }

  void run() {
    for (auto o : c_.diff) {
      const auto& y = c_.outputs[o];
      ys_.push_back(y);
      gs_.push_back(random_grad_output(y, gen_));
    }
    std::vector<at::Tensor> given;  // the grad_outputs as handed over, to see a backward write
    given.reserve(gs_.size());
    for (const auto& g : gs_) given.push_back(g.clone());
    try {
      want_grads_ = vjp(ys_, gs_, c_.leaves, r_.layout_counts);
    } catch (const std::exception&) {
      note_caught_error();
      return;  // the first-order checks report backward errors
    }
    if (grad_output_written(given)) return;  // the variants below would compare garbage
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
      refused("the forward", what, e);
      return;
    }
    for (std::size_t o = 0; o < c_.outputs.size() && o < outs.size(); ++o) {
      const std::string d = differs(outs[o], c_.outputs[o], rs_);
      if (d.empty()) continue;
      const std::optional<bool> consistent = stride_dependent(inputs, name, layout);
      if (consistent.value_or(false)) return;
      fail(j, -1,
           "forward output " + std::to_string(o) + " ('" + out_name(o) + "') differs with " + what,
           "  output " + std::to_string(o) + " " + d +
               "\n  a kernel that reads this input's memory as if it were contiguous (data_ptr() "
               "without the strides) does this; call .contiguous() or index with the strides" +
               (consistent.has_value()
                    ? "\n  (its Jacobian at this layout disagrees with its forward too: not an "
                      "op whose result depends on strides by definition)"
                    : ""));
      return;
    }
    std::vector<at::Tensor> ys;
    for (auto o : c_.diff) {
      if (o >= outs.size() || !outs[o].requires_grad()) return;  // stability: first order's
      ys.push_back(outs[o]);
    }
    compare_grads(vjp_or_fail(ys, gs_, inputs, j, -1, what), j, -1, what);
  }

  /// Whether the backward wrote into a grad_output it was given (`given`: their values before):
  /// a failure naming the output and an element. torch hands the caller's tensors to backward
  /// (torch.autograd.grad(y, x, v) passes v itself), so such a write changes the caller's v,
  /// even where the grads it returns are right.
  bool grad_output_written(const std::vector<at::Tensor>& given) {
    for (std::size_t i = 0; i < gs_.size(); ++i) {
      const at::Tensor changed = gs_[i].ne(given[i]).logical_and_(
          gs_[i].isnan().logical_and_(given[i].isnan()).logical_not_());
      if (!changed.any().item<bool>()) continue;
      // The first changed element: its flat position, and its index (none for a 0-d grad).
      const int64_t flat = changed.reshape(-1).nonzero()[0][0].item<int64_t>();
      std::vector<int64_t> where(static_cast<std::size_t>(changed.dim()));
      for (int64_t d = changed.dim() - 1, rest = flat; d >= 0; --d) {
        where[static_cast<std::size_t>(d)] = rest % changed.size(d);
        rest /= changed.size(d);
      }
      const std::string out = out_name(c_.diff[i]);
      add_failure(
          r_, Check::kMutation, false, static_cast<int>(i), -1,
          "the backward wrote into the grad_output of output " + std::to_string(i) + " ('" + out +
              "') it was given",
          "  " + (where.empty() ? std::string("its value") : "element " + format_index(where)) +
              " was " + std::to_string(given[i].reshape(-1)[flat].item<double>()) + ", is " +
              std::to_string(gs_[i].reshape(-1)[flat].item<double>()) +
              " after backward\n  torch passes the caller's grad_outputs to backward itself "
              "(torch.autograd.grad(y, x, v) hands it v), so an in-place op on the incoming grad "
              "changes the caller's tensor: compute into a new one (g * ..., not g.mul_(...))");
      return true;
    }
    return false;
  }

  /// Whether the op's Jacobian check passes at `inputs` (with a note when it does: its
  /// outputs depend on the input's layout, and its backward follows, as as_strided's family);
  /// nullopt when there is no such check or it could not run (it raised).
  std::optional<bool> stride_dependent(const std::vector<at::Tensor>& inputs,
                                       const std::string& name, const Layout& layout) {
    if (!jacobian_at_) return std::nullopt;
    std::vector<at::Tensor> point;
    point.reserve(inputs.size());
    for (const auto& t : inputs) point.push_back(t.detach());
    bool consistent = false;
    try {
      consistent = jacobian_at_(point);
    } catch (const std::exception&) {
      return std::nullopt;  // not shown consistent: the mismatch stands, nothing more claimed
    }
    if (consistent) {
      r_.notes.push_back("layout variants: the outputs depend on the layout of '" + name + "' (" +
                         layout.name +
                         "), and its Jacobian check passes at that layout: a stride-dependent op "
                         "(as as_strided), not compared with the given layout");
    }
    return consistent;
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
      refused("backward", what, e);
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

  /// An error raised only for a variant is a refusal, loud and not wrong (a kernel may demand
  /// contiguous inputs): noted, not failed.
  void refused(const std::string& part, const std::string& what, const std::exception& e) {
    r_.notes.push_back("layout variants: " + part + " raised with " + what + ", not compared (" +
                       one_line_error(e) + "); with the given layout it ran");
  }

  void fail(std::ptrdiff_t input, int output, std::string headline, std::string detail) {
    add_failure(r_, Check::kLayout, false, output, static_cast<int>(input), std::move(headline),
                std::move(detail));
  }

  std::string out_name(std::size_t o) const {
    return o < c_.output_names.size() ? c_.output_names[o] : "output " + std::to_string(o);
  }

  const JacobianAt& jacobian_at_;
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
                           double nondet_tol, GradcheckResult& result,
                           const JacobianAt& jacobian_at) {
  if (c.diff.empty()) return;
  LayoutCheck(f, c, seed, nondet_tol, result, jacobian_at).run();
}

}  // namespace customop::gradcheck::detail
