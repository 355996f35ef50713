#include "detail/input_subsets.h"

#include "detail/draws.h"
#include "detail/equal_to_rounding.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace customop::gradcheck::detail {

namespace {

at::Tensor or_zeros(const at::Tensor& grad, const at::Tensor& like) {
  return grad.defined() ? grad : at::zeros_like(like).detach();
}

class SubsetCheck {
 public:
  SubsetCheck(const Function& f, const Checked& c, std::uint64_t seed, double nondet_tol,
              GradcheckResult& r)
      : f_(f), c_(c), r_(r), nondet_tol_(nondet_tol), rs_(rounding_scale(c.leaves)) {
    at::Generator gen = cpu_generator(seed + 4);
    for (auto o : c_.diff) {
      const auto& y = c_.outputs[o];
      ys_.push_back(y);
      gs_.push_back(random_grad_output(y, gen));
    }
  }

  /// False when the reference grads (every input requiring grad) cannot be had.
  bool reference() {
    try {
      want_ = vjp(ys_, gs_, c_.leaves, r_.subset_counts);
    } catch (const std::exception&) {
      note_caught_error();
      return false;  // the first-order checks report backward errors
    }
    return true;
  }

  void run(const std::vector<bool>& grad_of, const std::string& name) {
    r_.input_subsets.push_back(name);
    const std::string what = "when only " + name + " requires grad";
    std::vector<at::Tensor> inputs, xs;
    std::vector<std::size_t> which;
    for (std::size_t k = 0; k < c_.leaves.size(); ++k) {
      inputs.push_back(clone_like(c_.leaves[k]).requires_grad_(grad_of[k]));
      if (grad_of[k]) {
        xs.push_back(inputs.back());
        which.push_back(k);
      }
    }
    std::vector<at::Tensor> outs;
    try {
      at::AutoGradMode grad_mode(true);
      outs = f_.eval(inputs);
    } catch (const std::exception& e) {
      fail(-1, "the forward raised an error " + what,
           "  " + one_line_error(e) + "\n  with every input requiring grad it ran");
      return;
    }
    std::vector<at::Tensor> ys, gs;
    for (std::size_t i = 0; i < c_.diff.size(); ++i) {
      const auto o = c_.diff[i];
      if (o < outs.size() && outs[o].defined() && outs[o].requires_grad()) {
        ys.push_back(outs[o]);
        gs.push_back(gs_[i]);
      }
    }
    std::vector<at::Tensor> got(xs.size());
    if (!ys.empty()) {
      try {
        got = vjp(ys, gs, xs, r_.subset_counts);
      } catch (const std::exception& e) {
        fail(-1, "backward raised an error " + what,
             "  " + one_line_error(e) + "\n  with every input requiring grad it ran");
        return;
      }
    }
    for (std::size_t s = 0; s < which.size(); ++s) {
      const std::size_t k = which[s];
      const std::string d =
          differs(or_zeros(got[s], xs[s]), or_zeros(want_[k], c_.leaves[k]), rs_, nondet_tol_);
      if (d.empty()) continue;
      fail(static_cast<int>(k),
           "the grad of input " + std::to_string(k) + " ('" + f_.input_names[k] + "') differs " +
               what,
           "  grad " + d +
               " (the reference: every input requiring grad, the same grad_outputs)\n  the "
               "backward takes another path when some inputs do not require grad "
               "(needs_input_grad, an output mask); that path computes another value");
      return;
    }
  }

 private:
  void fail(int input, std::string headline, std::string detail) {
    add_failure(r_, Check::kInputSubset, false, -1, input, std::move(headline), std::move(detail));
  }

  const Function& f_;
  const Checked& c_;
  GradcheckResult& r_;
  double nondet_tol_;
  RoundingScale rs_;
  std::vector<at::Tensor> ys_, gs_, want_;
};

}  // namespace

void check_input_subsets(const Function& f, const Checked& c, InputSubsets which,
                         std::uint64_t seed, double nondet_tol, GradcheckResult& result) {
  const std::size_t n = c.leaves.size();
  if (which == InputSubsets::kNone || n < 2 || c.diff.empty() ||
      result.failed(Check::kReentrancy)) {
    return;
  }
  SubsetCheck check(f, c, seed, nondet_tol, result);
  if (!check.reference()) return;
  const auto quoted = [&](std::size_t k) { return "'" + f.input_names[k] + "'"; };
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<bool> alone(n, false);
    alone[j] = true;
    check.run(alone, quoted(j));
  }
  if (which != InputSubsets::kEachAloneAndAllButOne || n < 3) return;
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<bool> rest(n, true);
    rest[j] = false;
    check.run(rest, "every input but " + quoted(j));
  }
}

}  // namespace customop::gradcheck::detail
