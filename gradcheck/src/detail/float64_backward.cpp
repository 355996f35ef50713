#include "detail/float64_backward.h"

#include "detail/values.h"
#include "detail/vjp.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <exception>
#include <utility>

namespace customop::gradcheck::detail {

Float64Backward::Float64Backward(const Function& f, const std::vector<at::Tensor>& point,
                                 std::vector<std::size_t> diff, OpCounts& counts)
    : f_(f), point_(point), diff_(std::move(diff)), counts_(counts) {}

bool Float64Backward::start() {
  if (started_) return !outputs_.empty();
  started_ = true;
  if (!f_.eval_reference) {
    why_ = "no float64 evaluator";
    return false;
  }
  try {
    at::AutoGradMode grad_mode(true);
    for (const auto& p : point_) leaves_.push_back(clone_like(p, at::kDouble).requires_grad_(true));
    const auto outs = f_.eval_reference(leaves_);
    for (const auto o : diff_) {
      const at::Tensor y = o < outs.size() ? outs[o] : at::Tensor();
      if (!y.defined() || y.scalar_type() != at::kDouble || !y.requires_grad()) {
        why_ = "output " + std::to_string(o) + " is not a float64 tensor that requires grad";
        outputs_.clear();
        return false;
      }
      outputs_.push_back(y);
    }
  } catch (const std::exception& e) {
    why_ = one_line_error(e);
    outputs_.clear();
  }
  return !outputs_.empty();
}

std::vector<at::Tensor> Float64Backward::run_vjp(std::size_t i, const at::Tensor& v) {
  std::vector<at::Tensor> grads;
  try {
    grads = vjp({outputs_[i]}, {v}, leaves_, counts_);
  } catch (const std::exception& e) {
    why_ = "its backward raised: " + one_line_error(e);
    outputs_.clear();
    return {};
  }
  // A grad that is not reached reads as zeros, as the harness's own VJPs read it (undefined
  // here); a non-finite one is no evidence about a finite float32 value.
  std::size_t nonfinite = grads.size();
  for (std::size_t j = 0; j < grads.size() && nonfinite == grads.size(); ++j) {
    if (!grads[j].defined()) continue;
    grads[j] = flat_double(grads[j]);
    if (!at::isfinite(grads[j]).all().item<bool>()) nonfinite = j;
  }
  if (nonfinite < grads.size()) {
    why_ = "its backward returned a non-finite grad for input " + std::to_string(nonfinite);
    outputs_.clear();
    return {};
  }
  return grads;
}

at::Tensor Float64Backward::projection(std::size_t i, const at::Tensor& v, std::size_t j,
                                       int64_t input_numel) {
  if (!start()) return {};
  auto it = projections_.find(i);
  if (it == projections_.end()) {
    const at::Tensor& y = outputs_[i];
    auto grads = run_vjp(i, v.to(y.device(), at::kDouble).reshape(y.sizes()));
    if (grads.empty()) return {};
    it = projections_.emplace(i, std::move(grads)).first;
  }
  const at::Tensor& g = it->second[j];
  if (!g.defined()) return at::zeros({input_numel}, at::kDouble);
  return g.numel() == input_numel ? g : at::Tensor();
}

at::Tensor Float64Backward::block(std::size_t i, std::size_t j, int64_t input_numel,
                                  const std::vector<int64_t>& rows) {
  if (!start()) return {};
  const at::Tensor& y = outputs_[i];
  at::Tensor out = at::full({y.numel(), input_numel}, NAN, at::kDouble);
  for (const int64_t r : rows) {
    auto it = rows_.find({i, r});
    if (it == rows_.end()) {
      auto grads = run_vjp(i, one_hot_like(y, r));
      if (grads.empty()) return {};
      it = rows_.emplace(std::make_pair(i, r), std::move(grads)).first;
    }
    const at::Tensor& g = it->second[j];
    if (!g.defined()) {
      out.select(0, r).zero_();
      continue;
    }
    if (g.numel() != input_numel) {
      why_ = "its backward returned a grad of " + std::to_string(g.numel()) + " elements for " +
             std::to_string(input_numel);
      outputs_.clear();
      return {};
    }
    set_row(out, r, g);
  }
  return out;
}

bool drop_unconverged(Numerical& num, std::size_t j, int64_t r0, double eps,
                      const at::Tensor& value, const std::vector<int64_t>& failed,
                      at::Tensor& ana64) {
  const int64_t n = value.size(1);
  const at::Tensor v = dense_double(value);
  const double* d1 = v.const_data_ptr<double>();
  double* a64 = ana64.mutable_data_ptr<double>();
  std::map<int64_t, std::vector<double>> half;  // column -> D(eps / 2) of every output row
  bool any = false;
  for (const int64_t e : failed) {
    const int64_t k = e % n;
    auto it = half.find(k);
    if (it == half.end()) {
      const Sampled s = num.sample_element(j, k, eps / 2);
      const auto d2 = values_of(s.levels.front().diff);
      const double w = s.levels.front().w.item<double>();  // perturbation applied / nominal
      std::vector<double> col(d2.begin(), d2.end());
      if (w != 0 && w != 1.0) {
        for (double& x : col) x /= w;
      }
      it = half.emplace(k, std::move(col)).first;
    }
    const double moved = std::abs(d1[e] - it->second[static_cast<std::size_t>(r0 + e / n)]);
    if (!(moved <= std::abs(a64[e] - d1[e]) / 8)) {
      a64[e] = NAN;
      any = true;
    }
  }
  return any;
}

}  // namespace customop::gradcheck::detail
