// The autocast kernel of a customop op: at AutocastCPU and AutocastCUDA, casts the floating
// tensor arguments on the autocast device as the op's AutocastPolicy says, then calls the op
// again below autocast (as torch's own autocast wrappers do).

#include <customop/autocast.h>
#include <customop/op_core.h>

#include "op_core_internal.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <algorithm>

namespace customop {

std::string_view autocast_policy_name(AutocastPolicy policy) {
  switch (policy) {
    case AutocastPolicy::kFloat32: return "float32";
    case AutocastPolicy::kLowerPrecision: return "lower_precision";
    case AutocastPolicy::kPromote: return "promote";
    case AutocastPolicy::kRefuse: return "refuse";
  }
  return "?";
}

namespace {

c10::DispatchKey autocast_key(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? c10::DispatchKey::AutocastCUDA
                                         : c10::DispatchKey::AutocastCPU;
}

/// Calls `fn` on every tensor argument among the top `n` IValues of `stack` (Tensor, Tensor?,
/// Tensor[]), replacing each with what `fn` returns.
template <class F>
void for_each_tensor(torch::jit::Stack& stack, std::size_t n, F&& fn) {
  for (auto it = stack.end() - static_cast<std::ptrdiff_t>(n); it != stack.end(); ++it) {
    if (it->isTensor()) {
      *it = fn(it->toTensor());
    } else if (it->isTensorList()) {
      auto list = it->toTensorList();
      for (std::size_t k = 0; k < list.size(); ++k) list.set(k, fn(list.get(k)));
    }
  }
}

int width(c10::ScalarType t) {
  switch (t) {
    case at::kDouble: return 3;
    case at::kFloat: return 2;
    default: return 1;  // float16, bfloat16
  }
}

}  // namespace

/// The boxed functor at AutocastCPU / AutocastCUDA.
struct AutocastKernel final : c10::OperatorKernel {
  AutocastKernel(const OpCore* op, c10::DeviceType device) : op_(op), device_(device) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet /*ks*/,
                  torch::jit::Stack* stack) {
    op_->autocast_kernel(h, device_, stack);
  }
  const OpCore* op_;
  c10::DeviceType device_;
};

void OpCore::autocast_kernel(const c10::OperatorHandle& h, c10::DeviceType device,
                             torch::jit::Stack* stack) const {
  const auto policy = static_cast<AutocastPolicy>(autocast_policy_.load(std::memory_order_acquire));
  c10::impl::ExcludeDispatchKeyGuard no_autocast(autocast_key(device));
  TORCH_CHECK(policy != AutocastPolicy::kRefuse, name_, ": refuses to run under autocast (",
              c10::DeviceTypeName(device, /*lower_case=*/true), "), as declared at ",
              format_location(autocast_loc_),
              " (AutocastPolicy::kRefuse); call it outside torch.autocast, or in a "
              "torch.autocast(..., enabled=False) region with its inputs cast by hand");
  const std::size_t n = args_.size();
  // Eligible: a defined floating tensor on the autocast device.
  const auto eligible = [device](const at::Tensor& t) {
    return t.defined() && at::isFloatingType(t.scalar_type()) && t.device().type() == device;
  };
  c10::ScalarType target = at::kFloat;
  if (policy == AutocastPolicy::kLowerPrecision) {
    target = at::autocast::get_autocast_dtype(device);
  } else if (policy == AutocastPolicy::kPromote) {
    std::optional<c10::ScalarType> widest;
    for_each_tensor(*stack, n, [&](const at::Tensor& t) {
      if (eligible(t)) {
        const auto d = t.scalar_type();
        if (!widest || width(d) > width(*widest)) {
          widest = d;
        } else if (width(d) == width(*widest) && d != *widest) {
          widest = at::kFloat;  // float16 beside bfloat16: neither holds the other
        }
      }
      return t;
    });
    if (!widest) {
      h.callBoxed(stack);
      return;
    }
    target = *widest;
  }
  for_each_tensor(*stack, n, [&](const at::Tensor& t) {
    const bool cast = eligible(t) && t.scalar_type() != target && t.scalar_type() != at::kDouble;
    return cast ? t.to(target) : t;
  });
  h.callBoxed(stack);
}

void OpCore::set_autocast(AutocastPolicy policy, std::source_location loc) {
  TORCH_CHECK(autocast_policy_.load(std::memory_order_acquire) < 0, name_, ": an autocast policy (",
              autocast_policy_name(*autocast_policy()), ") is already declared at ",
              format_location(autocast_loc_), "; the second one at ", format_location(loc),
              " is refused");
  for (auto key : {c10::DispatchKey::AutocastCPU, c10::DispatchKey::AutocastCUDA}) {
    TORCH_CHECK(!handle_->hasKernelForDispatchKey(key), name_, ": already has an ",
                c10::toString(key), " kernel registered outside customop (", handle_->debug(),
                "); the autocast policy at ", format_location(loc), " is refused");
  }
  TORCH_CHECK(!mutates_ || policy == AutocastPolicy::kRefuse, name_,
              ": writes arguments in place (Tensor(a!)), so the autocast policy ",
              autocast_policy_name(policy), " at ", format_location(loc),
              " is refused: a cast would hand the kernel a copy, and the caller's tensor would "
              "never be written. Declare AutocastPolicy::kRefuse, or none");
  autocast_loc_ = loc;
  // Published before the kernel exists: a call under autocast never reads "no policy".
  autocast_policy_.store(static_cast<int>(policy), std::memory_order_release);
  auto lib = std::make_unique<torch::Library>(torch::Library::FRAGMENT, ns_, std::nullopt,
                                              loc.file_name(), loc.line());
  const std::string unqualified = name_.substr(name_.find("::") + 2);
  for (auto device : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
    lib->impl(
        unqualified.c_str(),
        torch::dispatch(autocast_key(device), torch::CppFunction::makeFromBoxedFunctor(
                                                  std::make_unique<AutocastKernel>(this, device))));
  }
  libraries_.push_back(std::move(lib));
}

std::optional<AutocastPolicy> OpCore::autocast_policy() const {
  const int p = autocast_policy_.load(std::memory_order_acquire);
  if (p < 0) return std::nullopt;
  return static_cast<AutocastPolicy>(p);
}

}  // namespace customop
