// The Autograd kernel: the generated autograd kernel (autograd_node.cpp) when both formula
// halves are published, the reference's "autograd not implemented" fallback and
// half-registration errors otherwise (forward-mode AD: forward_grad.cpp); the formula
// registrations; what one call's args and outputs look like for the backward Node (args info,
// non-differentiable outputs).

#include "op_core_internal.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <optional>

namespace customop {

using detail::check_tensor_args_defined;
using detail::ivalue_type_name;

// ---- autograd ----------------------------------------------------------------------------

namespace {
void check_no_library_autograd_kernel(const std::string& name, const c10::OperatorHandle& h,
                                      const std::source_location& loc) {
  TORCH_CHECK(!h.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd), name,
              ": already has a CompositeImplicitAutograd kernel registered outside customop (",
              h.debug(),
              "); its autograd comes from that decomposition, so the backward "
              "formula at ",
              format_location(loc),
              " is refused. Register it for "
              "CompositeExplicitAutograd or per device instead");
  for (auto key : {c10::DispatchKey::Autograd, c10::DispatchKey::AutogradCPU,
                   c10::DispatchKey::AutogradCUDA}) {
    TORCH_CHECK(!h.hasKernelForDispatchKey(key), name, ": already has an ", key,
                " kernel registered outside customop (", h.debug(), "); the backward formula at ",
                format_location(loc),
                " is refused. Remove that registration to use customop's autograd glue");
  }
}
}  // namespace

namespace {
void check_not_mutating(const OpCore& op, const std::source_location& loc) {
  TORCH_CHECK(!op.mutates(), op.name(),
              ": writes an argument in place (Tensor(a!)); a backward formula for an op that "
              "writes its arguments is not supported yet, so the one at ",
              format_location(loc),
              " is refused. Calls whose inputs require grad are refused with an error naming "
              "the argument instead of returning wrong gradients");
}
}  // namespace

void OpCore::note_save_for_backward(std::source_location loc) {
  check_not_mutating(*this, loc);
  TORCH_CHECK(!save_loc_.has_value(), name_, ": save_for_backward is already registered at ",
              format_location(*save_loc_), "; the second one at ", format_location(loc),
              " is refused");
  if (!autograd_indirection_installed_) {
    check_no_library_autograd_kernel(name_, *handle_, loc);
    install_autograd_indirection();
  }
  save_loc_ = loc;
}

void OpCore::note_backward(std::source_location loc, std::optional<std::vector<bool>> output_diff,
                           bool returns_backward_ok) {
  check_not_mutating(*this, loc);
  TORCH_CHECK(!backward_loc_.has_value(), name_, ": backward is already registered at ",
              format_location(*backward_loc_), "; the second one at ", format_location(loc),
              " is refused");
  TORCH_CHECK_TYPE(returns_backward_ok, name_,
                   ": cannot register a backward formula: every return must be Tensor, "
                   "Tensor[], int, float or bool");
  if (output_diff.has_value()) {
    TORCH_CHECK_VALUE(output_diff->size() == returns_.size(), name_,
                      ": output_differentiability has ", output_diff->size(),
                      " entries but the op has ", returns_.size(),
                      " returns; give one bool per return (at ", format_location(loc), ")");
  }
  if (!autograd_indirection_installed_) {
    check_no_library_autograd_kernel(name_, *handle_, loc);
    install_autograd_indirection();
  }
  output_differentiability_ = std::move(output_diff);
  backward_loc_ = loc;
}

void OpCore::note_jvp(std::source_location loc) {
  TORCH_CHECK(!mutates_, name_,
              ": writes an argument in place (Tensor(a!)); a JVP for an op that writes its "
              "arguments is not supported, so the one at ",
              format_location(loc), " is refused");
  TORCH_CHECK(!jvp_loc_.has_value(), name_, ": a JVP is already registered at ",
              format_location(*jvp_loc_), "; the second one at ", format_location(loc),
              " is refused");
  if (!autograd_indirection_installed_) {
    check_no_library_autograd_kernel(name_, *handle_, loc);
    install_autograd_indirection();
  }
  jvp_loc_ = loc;
}

std::string OpCore::backward_location() const {
  return backward_loc_ ? format_location(*backward_loc_) : std::string("<unknown>");
}

void OpCore::autograd_kernel(const c10::OperatorHandle& h, c10::DispatchKeySet ks,
                             torch::jit::Stack* stack) {
  check_tensor_args_defined(name_, args_, *stack);
  const detail::ArgsCheckedScope checked(stack);
  // NB: a copy of the args only when a tangent needs the JVP after the kernel consumed them.
  std::optional<torch::jit::Stack> fw_args;
  if (forward_grad_needed(*stack)) {
    fw_args.emplace(stack->end() - static_cast<std::ptrdiff_t>(args_.size()), stack->end());
  }
  // NB: the locations are read only once their part is published (another thread may be
  // registering the formula while this call runs).
  const uint8_t parts = formula_parts_.load(std::memory_order_acquire);
  if (parts == (kSavePart | kBackwardPart)) {
    run_autograd(ks, stack, fw_args ? &*fw_args : nullptr);
    return;
  }
  if (parts != 0) {
    const bool have_backward = (parts & kBackwardPart) != 0;
    const char* found = have_backward ? "backward" : "save_for_backward";
    const char* missing = have_backward ? "save_for_backward" : "backward";
    TORCH_CHECK(false, "We found a '", found, "' registration for ", name_, " at ",
                format_location(have_backward ? *backward_loc_ : *save_loc_),
                " but were unable to find a '", missing,
                "' registration. To use the CustomOp API to register a backward formula, "
                "please provide us both a backward function and a 'save for backward' "
                "function via `impl_backward` and `impl_save_for_backward` respectively.");
  }
  // Autograd not implemented: an error only when a gradient could be asked for.
  if (at::GradMode::is_enabled()) {
    if (mutates_) check_written_args_autograd(*stack);
    const size_t n = schema_.arguments().size();
    for (size_t i = 0; i < n; ++i) {
      const auto& v = (*stack)[stack->size() - n + i];
      bool requires_grad = false;
      if (v.isTensor()) {
        requires_grad = v.toTensor().defined() && v.toTensor().requires_grad();
      } else if (v.isTensorList()) {
        for (const auto& t : v.toTensorVector()) {
          requires_grad = requires_grad || (t.defined() && t.requires_grad());
        }
      }
      TORCH_CHECK_NOT_IMPLEMENTED(
          !requires_grad, "Autograd has not been implemented for operator ", name_, " (argument '",
          schema_.arguments()[i].name(), "' requires grad). ",
          mutates_ ? "The op writes arguments in place, and such ops cannot have a backward "
                     "formula yet: call it under torch.no_grad() / torch::NoGradGuard, or pass "
                     "that argument detached"
                   : "Register a formula with impl_save_for_backward and impl_backward, or call "
                     "the op under torch::NoGradGuard");
    }
  }
  if (mutates_) {
    // NB: below autograd only, so the ADInplaceOrView kernel runs and bumps the versions of
    // the written arguments (op_mutation.cpp).
    at::AutoDispatchBelowAutograd guard;
    h.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
    return;
  }
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    h.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
  }
  if (fw_args) apply_forward_grads(*fw_args, *stack);
}

void OpCore::collect_args_info(const torch::jit::Stack& stack, detail::ArgsInfo& info) const {
  const size_t n = args_.size();
  info.counts.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& v = stack[stack.size() - n + i];
    switch (args_[i].kind) {
      case ArgKind::kTensor: info.counts[i] = 1; break;
      case ArgKind::kOptionalTensor:
        info.counts[i] = (v.isNone() || !v.toTensor().defined()) ? detail::ArgsInfo::kNone : 1;
        break;
      case ArgKind::kTensorList:
        info.counts[i] = static_cast<int32_t>(v.toTensorList().size());
        break;
      default: info.counts[i] = detail::ArgsInfo::kNotTensorLike; break;
    }
  }
}

void OpCore::non_differentiable_outputs(const torch::jit::Stack& outputs,
                                        std::vector<at::Tensor>& out) const {
  if (!output_differentiability_) return;
  const auto& od = *output_differentiability_;
  for (size_t i = 0; i < od.size(); ++i) {
    const auto& v = outputs[outputs.size() - od.size() + i];
    if (v.isTensor()) {
      if (!od[i]) out.push_back(v.toTensor());
      continue;
    }
    if (v.isTensorList()) {
      if (!od[i]) {
        for (const auto& t : v.toTensorList()) out.push_back(t);
      }
      continue;
    }
    if (od[i]) {
      std::string list = "[";
      for (size_t j = 0; j < od.size(); ++j)
        list += (j ? ", " : "") + std::string(od[j] ? "True" : "False");
      TORCH_CHECK(false, name_, ": With output_differentiability=", list, "]. At idx ", i,
                  ", we received an object of type ", ivalue_type_name(v),
                  " that is not a Tensor, so it cannot be marked as differentiable in "
                  "output_differentiability.");
    }
  }
}

}  // namespace customop
