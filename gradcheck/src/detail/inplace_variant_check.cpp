// The in-place variant check (GradcheckOptions::check_inplace_variant): an op's in-place
// variant `ns::name_` must write the functional op's result into its first argument, return
// that argument, keep its layout, and bump its version counter (autograd sees the write only
// through the counter). ATen's own pairs (mul / mul_) pass it; a hand-written in-place kernel
// that writes a strided tensor as if it were contiguous does not, so the first argument is
// tried as given and again transposed in memory. When the sample has arguments that require
// grad, the variant must either refuse them (customop's default) or give the functional op's
// grads (check_inplace_grads).

#include "detail/checker.h"
#include "detail/op_checks.h"
#include "detail/stack_tensors.h"
#include "detail/value_diff.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <string>
#include <vector>

namespace customop::gradcheck::detail {

namespace {

std::optional<c10::OperatorHandle> inplace_variant_of(const c10::OperatorHandle& op) {
  const auto& schema = op.schema();
  if (schema.is_mutable() || schema.returns().size() != 1 || schema.arguments().empty()) {
    return std::nullopt;
  }
  auto variant =
      c10::Dispatcher::singleton().findSchema({schema.name() + "_", schema.overload_name()});
  if (!variant) return std::nullopt;
  const auto& first = variant->schema().arguments();
  const auto* alias = first.empty() ? nullptr : first[0].alias_info();
  if (alias == nullptr || !alias->isWrite() || first.size() != schema.arguments().size()) {
    return std::nullopt;
  }
  return variant;
}

// A copy of `t` with its last two dims transposed in memory (same sizes and values).
at::Tensor transposed_in_memory(const at::Tensor& t) {
  return t.detach().transpose(-1, -2).contiguous().transpose(-1, -2);
}

// How far the two VJPs may differ: customop's variants run the functional op's own backward
// (the same values), but another library's in-place op may have a formula of its own, rounded
// differently: some hundreds of units of the dtype's epsilon.
double grad_tolerance(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble: return 1e-12;
    case at::kHalf: return 4e-3;
    case at::kBFloat16: return 3e-2;
    default: return 1e-5;
  }
}

// Grads through the in-place variant, for a sample with arguments that require grad. Either the
// variant refuses the call, leaving every argument unchanged, or it differentiates, and then the
// VJP of `x' = x.clone(); name_(x', ...)` must equal the functional op's VJP (same cotangent)
// for every argument that requires grad; the gradient checks compare the functional op's with
// finite differences. A kernel that writes x below autograd and records no backward leaves x'
// with the clone's history: its grads are the identity's, wrong and without a warning.
void check_inplace_grads(const c10::OperatorHandle& op, const c10::OperatorHandle& variant,
                         const std::string& name, const torch::jit::Stack& args,
                         GradcheckResult& result) {
  std::vector<size_t> wrt;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].isTensor() && args[i].toTensor().defined() && args[i].toTensor().requires_grad()) {
      wrt.push_back(i);
    }
  }
  if (wrt.empty()) return;
  const auto& arguments = variant.schema().arguments();
  const std::string x = arguments[0].name();
  const at::AutoGradMode grad_mode(true);
  // Fresh leaves with the sample's values and requires_grad flags, one set per side.
  const auto leaves = [&args] {
    return map_stack_tensors(args, [](const at::Tensor& t) {
      return t.detach().clone().requires_grad_(t.requires_grad());
    });
  };
  const auto inputs_of = [&wrt](const torch::jit::Stack& s) {
    std::vector<at::Tensor> ts;
    ts.reserve(wrt.size());
    for (const size_t i : wrt) ts.push_back(s[i].toTensor());
    return ts;
  };
  torch::jit::Stack f_args = leaves();
  torch::jit::Stack f_call = f_args;
  at::Tensor cotangent;
  std::vector<at::Tensor> want;
  try {
    op.callBoxed(f_call);
    if (f_call.size() != 1 || !f_call[0].isTensor() || !f_call[0].toTensor().requires_grad()) {
      return;  // not differentiable here: the gradient checks report it
    }
    const at::Tensor y = f_call[0].toTensor();
    // Distinct entries, so a grad that permutes or drops elements shows.
    cotangent = at::linspace(0.5, 1.5, y.numel(), y.options()).reshape(y.sizes());
    want = torch::autograd::grad({y}, inputs_of(f_args), {cotangent}, false, false, true);
  } catch (const std::exception&) {
    note_caught_error();
    return;  // the gradient checks report the functional op's errors
  }
  torch::jit::Stack i_args = leaves();
  torch::jit::Stack call = i_args;
  // x' is not a leaf: torch refuses in-place writes to a leaf that requires grad.
  call[0] = i_args[0].toTensor().clone();
  const at::Tensor self = call[0].toTensor();
  try {
    variant.callBoxed(call);
  } catch (const std::exception& e) {
    note_caught_error();
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].isTensor() || !args[i].toTensor().defined()) continue;
      const at::Tensor now = i == 0 ? self : i_args[i].toTensor();
      const std::string diff = first_difference(now.detach(), args[i].toTensor().detach());
      if (!diff.empty()) {
        add_failure(
            result, Check::kInplaceVariant, false, 0, static_cast<int>(i),
            c10::str(name, " refused a call with arguments that require grad (", one_line_error(e),
                     ") but wrote argument '", arguments[i].name(), "' first"),
            c10::str("  ", diff, "; a refused call must leave every argument unchanged"));
        return;
      }
    }
    result.notes.push_back(c10::str("inplace variant: ", name,
                                    " refuses arguments that require grad, leaving them "
                                    "unchanged (",
                                    one_line_error(e), ")"));
    return;
  }
  std::vector<at::Tensor> got;
  try {
    got = torch::autograd::grad({self}, inputs_of(i_args), {cotangent.to(self.scalar_type())},
                                false, false, true);
  } catch (const std::exception& e) {
    note_caught_error();
    add_failure(result, Check::kInplaceVariant, false, 0, 0,
                c10::str(name,
                         " accepted arguments that require grad, but no grad could be "
                         "taken through it"),
                c10::str("  ", one_line_error(e),
                         "; refuse such a call under grad mode, or give the op a backward"));
    return;
  }
  std::vector<std::string> names;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const at::Tensor leaf = i_args[wrt[k]].toTensor();
    const at::Tensor g = got[k].defined() ? got[k] : at::zeros_like(leaf);
    const at::Tensor w = want[k].defined() ? want[k] : at::zeros_like(leaf);
    // The in-place result is rounded to x's dtype (x.mul_(y) with a float32 x and a float64 y):
    // the grads then agree only to the coarser of the two dtypes.
    const double tol =
        std::max(grad_tolerance(leaf.scalar_type()), grad_tolerance(self.scalar_type()));
    const std::string diff = first_difference(g, w, tol);
    const std::string& arg = arguments[wrt[k]].name();
    if (!diff.empty()) {
      add_failure(result, Check::kInplaceVariant, false, 0, static_cast<int>(wrt[k]),
                  c10::str(name, " gives a grad of argument '", arg,
                           "' that disagrees with the functional op's"),
                  c10::str("  ", diff, " (the VJP of ", x, "' = ", x, ".clone(); ", name, "(", x,
                           "', ...) against the functional op's, same cotangent)"));
      return;
    }
    names.push_back(c10::str("'", arg, "'"));
  }
  result.notes.push_back(c10::str("inplace variant: ", name, "'s grads of ", c10::Join(", ", names),
                                  " match the functional op's (VJP, same cotangent)"));
}

void check_inplace_variant(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                           GradcheckResult& result) {
  const auto variant = inplace_variant_of(op);
  if (!variant) {
    result.notes.emplace_back("inplace variant: not checked (no in-place variant ns::name_)");
    return;
  }
  const std::string name =
      variant->schema().name() +
      (variant->schema().overload_name().empty() ? "" : "." + variant->schema().overload_name());
  if (variant->hasTag(at::Tag::inplace_view)) {
    // t_, squeeze_, unsqueeze_: they change their argument's sizes and strides by design.
    result.notes.push_back(c10::str("inplace variant: ", name,
                                    " not checked (an in-place view op, tagged inplace_view: "
                                    "it changes its argument's layout by design)"));
    return;
  }
  const std::string x = variant->schema().arguments()[0].name();
  if (args.empty() || !args[0].isTensor() || !args[0].toTensor().defined()) return;
  const at::NoGradGuard no_grad;
  const auto functional = functional_result(op, args);
  if (!functional || functional->size() != 1 || !(*functional)[0].isTensor()) return;
  at::Tensor want = (*functional)[0].toTensor();
  // An in-place op keeps its argument's dtype where the functional op promotes (float32
  // x.mul_(float64 y)): the result cast to x's dtype is what it must write.
  const bool cast = want.scalar_type() != args[0].toTensor().scalar_type();
  if (cast) want = want.to(args[0].toTensor().scalar_type());
  std::vector<std::pair<std::string, bool>> layouts = {{"as given", false}};
  if (args[0].toTensor().dim() >= 2) layouts.emplace_back("transposed in memory", true);
  for (const auto& [layout, transpose] : layouts) {
    torch::jit::Stack call = clone_stack_detached(args);
    if (transpose) call[0] = transposed_in_memory(call[0].toTensor());
    const at::Tensor self = call[0].toTensor();
    const auto strides = self.strides().vec();
    const auto version = self._version();
    try {
      variant->callBoxed(call);
    } catch (const std::exception& e) {
      note_caught_error();
      result.notes.push_back(c10::str("inplace variant: ", name, " refused the sample with '", x,
                                      "' ", layout, " (", one_line_error(e), ")"));
      return;
    }
    const std::string where = c10::str(" ('", x, "' ", layout, ")");
    if (call.size() != 1 || !call[0].isTensor() || !call[0].toTensor().is_same(self)) {
      add_failure(result, Check::kInplaceVariant, false, 0, 0,
                  c10::str(name, " did not return its first argument '", x, "'", where),
                  "  an in-place op returns the tensor it wrote (Tensor(a!))");
      return;
    }
    if (self.strides().vec() != strides) {
      add_failure(result, Check::kInplaceVariant, false, 0, 0,
                  c10::str(name, " changed the strides of '", x, "'", where),
                  "  an in-place op keeps its argument's layout: callers hold views of it");
      return;
    }
    const std::string diff = first_difference(self, want);
    if (!diff.empty()) {
      add_failure(result, Check::kInplaceVariant, false, 0, 0,
                  c10::str(name, " disagrees with the functional op in '", x, "'", where),
                  c10::str("  ", diff,
                           transpose ? "; a kernel that writes a strided tensor as if it were "
                                       "contiguous does this"
                                     : ""));
      return;
    }
    if (!self.is_inference() && self._version() == version) {
      add_failure(result, Check::kInplaceVariant, false, 0, 0,
                  c10::str(name, " left the version counter of '", x, "' unchanged", where),
                  "  autograd sees an in-place write only through the counter: a tensor saved "
                  "for backward and then overwritten gives wrong grads silently (register an "
                  "ADInplaceOrView kernel that bumps it)");
      return;
    }
  }
  result.notes.push_back(c10::str("inplace variant: ", name, " wrote the functional op's result",
                                  cast ? " (cast to its dtype)" : "", " into '", x, "' (",
                                  layouts.size(),
                                  " layout(s)), returned it, kept its strides and bumped its "
                                  "version"));
  check_inplace_grads(op, *variant, name, args, result);
}

bool inplace_variant_enabled(const c10::OperatorHandle& /*op*/, const GradcheckOptions& options,
                             std::string& why_not) {
  why_not = "check_inplace_variant off";
  return options.check_inplace_variant;
}

}  // namespace

const OpCheck kInplaceVariantCheck = {"inplace variant", &inplace_variant_enabled,
                                      &check_inplace_variant};

}  // namespace customop::gradcheck::detail
