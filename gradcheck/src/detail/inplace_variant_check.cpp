// The in-place variant check (GradcheckOptions::check_inplace_variant): an op's in-place
// variant `ns::name_` must write the functional op's result into its first argument, return
// that argument, keep its layout, and bump its version counter (autograd sees the write only
// through the counter). ATen's own pairs (mul / mul_) pass it; a hand-written in-place kernel
// that writes a strided tensor as if it were contiguous does not, so the first argument is
// tried as given and again transposed in memory.

#include "detail/checker.h"
#include "detail/op_checks.h"
#include "detail/stack_tensors.h"
#include "detail/value_diff.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

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

torch::jit::Stack inplace_clone_args(const torch::jit::Stack& args) {
  return map_stack_tensors(args, [](const at::Tensor& t) { return t.detach().clone(); });
}

// A copy of `t` with its last two dims transposed in memory (same sizes and values).
at::Tensor transposed_in_memory(const at::Tensor& t) {
  return t.detach().transpose(-1, -2).contiguous().transpose(-1, -2);
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
  const std::string x = variant->schema().arguments()[0].name();
  if (args.empty() || !args[0].isTensor() || !args[0].toTensor().defined()) return;
  const at::NoGradGuard no_grad;
  torch::jit::Stack functional = inplace_clone_args(args);
  try {
    op.callBoxed(functional);
  } catch (const std::exception&) {
    note_caught_error();
    return;  // the other checks report the functional op's error
  }
  if (functional.size() != 1 || !functional[0].isTensor()) return;
  const at::Tensor want = functional[0].toTensor();
  std::vector<std::pair<std::string, bool>> layouts = {{"as given", false}};
  if (args[0].toTensor().dim() >= 2) layouts.emplace_back("transposed in memory", true);
  for (const auto& [layout, transpose] : layouts) {
    torch::jit::Stack call = inplace_clone_args(args);
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
  result.notes.push_back(c10::str("inplace variant: ", name,
                                  " wrote the functional op's result into '", x, "' (",
                                  layouts.size(),
                                  " layout(s)), returned it, kept its strides and bumped its "
                                  "version"));
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
