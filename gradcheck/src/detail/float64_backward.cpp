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

at::Tensor Float64Backward::block(std::size_t i, std::size_t j, int64_t input_numel,
                                  const std::vector<int64_t>& rows) {
  if (!start()) return {};
  const at::Tensor& y = outputs_[i];
  at::Tensor out = at::full({y.numel(), input_numel}, NAN, at::kDouble);
  for (const int64_t r : rows) {
    auto it = rows_.find({i, r});
    if (it == rows_.end()) {
      std::vector<at::Tensor> grads;
      try {
        grads = vjp({y}, {one_hot_like(y, r)}, leaves_, counts_);
      } catch (const std::exception& e) {
        why_ = "its backward raised: " + one_line_error(e);
        outputs_.clear();
        return {};
      }
      for (auto& g : grads) {
        if (g.defined()) g = flat_double(g);
      }
      it = rows_.emplace(std::make_pair(i, r), std::move(grads)).first;
    }
    const at::Tensor& g = it->second[j];
    if (!g.defined()) {
      out.select(0, r).zero_();  // not reached: a zero row, as the harness's own VJPs read it
    } else if (g.numel() == input_numel) {
      set_row(out, r, g);
    }
  }
  return out;
}

}  // namespace customop::gradcheck::detail
