// Ops that write their arguments in place (`Tensor(a!)`, customop::MutableTensor fields): the
// ADInplaceOrView kernel that bumps the version counter of every written tensor after the
// kernel ran (what torch's generated in-place kernels do, so a saved tensor that was
// overwritten raises in backward), the checks every call makes before a kernel runs (an
// expanded written tensor, a written tensor sharing memory with another argument), and the
// autograd-time refusals (a written tensor that requires grad, or views one that does).
// Every check runs before the kernel: a refused call leaves every argument unchanged.

#include "op_core_internal.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

#include <sstream>
#include <string>
#include <string_view>

namespace customop {

struct InplaceOrViewKernel final : c10::OperatorKernel {
  explicit InplaceOrViewKernel(const OpCore* op) : op_(op) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    op_->inplace_or_view_kernel(h, ks, stack);
  }
  const OpCore* op_;
};

namespace {

// One tensor of a call's arguments, with the argument (and list element) it came from.
struct NamedTensor {
  at::Tensor tensor;
  const ArgSpec* arg;  // the argument it is (or is an element of)
  int64_t element;     // its index in a Tensor[] argument, -1 for a Tensor argument
  bool written;
  /// "argument 'x'" or "argument 'xs' element 2". NB: built for an error message only, not on
  /// every call.
  std::string what() const {
    std::string out = "argument '" + arg->name + "'";
    if (element >= 0) out += " element " + std::to_string(element);
    return out;
  }
};

std::vector<NamedTensor> tensors_of(const std::vector<ArgSpec>& args,
                                    const torch::jit::Stack& stack) {
  std::vector<NamedTensor> out;
  const size_t n = args.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& v = stack[stack.size() - n + i];
    if (v.isTensor() && v.toTensor().defined()) {
      out.push_back({v.toTensor(), &args[i], -1, args[i].written});
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        const at::Tensor& t = list.get(k);
        if (t.defined()) out.push_back({t, &args[i], static_cast<int64_t>(k), false});
      }
    }
  }
  return out;
}

std::string describe(const at::TensorBase& t) {
  std::ostringstream os;
  os << "sizes " << t.sym_sizes() << ", strides " << t.sym_strides();
  return os.str();
}

// Whether two tensors may touch the same bytes: "shares" (torch's exact answer), "may share"
// (for what torch calls too hard, a non-dense tensor: their byte ranges within one storage
// intersect, though strided views may interleave without touching), or nullptr.
const char* shared_memory(const at::Tensor& a, const at::Tensor& b) {
  switch (at::get_overlap_status(a, b)) {
    case at::MemOverlapStatus::No: return nullptr;
    case at::MemOverlapStatus::Full:
    case at::MemOverlapStatus::Partial: return "shares";
    case at::MemOverlapStatus::TooHard: break;
  }
  if (!a.has_storage() || !b.has_storage() || !a.storage().is_alias_of(b.storage())) return nullptr;
  // NB: symbolic sizes (FakeTensor under dynamic shapes) cannot be read here; the real call
  // checks again.
  if (a.unsafeGetTensorImpl()->has_symbolic_sizes_strides() ||
      b.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    return nullptr;
  }
  if (a.numel() == 0 || b.numel() == 0) return nullptr;
  auto extent = [](const at::Tensor& t) {
    int64_t last = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const auto item = static_cast<int64_t>(t.dtype().itemsize());
    return std::pair<int64_t, int64_t>{t.storage_offset() * item, (last + 1) * item};
  };
  const auto [a0, a1] = extent(a);
  const auto [b0, b1] = extent(b);
  return a0 < b1 && b0 < a1 ? "may share" : nullptr;
}

}  // namespace

void OpCore::install_inplace_or_view_kernel(torch::Library& lib) {
  const std::string unqualified = name_.substr(name_.find("::") + 2);
  lib.impl(unqualified.c_str(), torch::dispatch(c10::DispatchKey::ADInplaceOrView,
                                                torch::CppFunction::makeFromBoxedFunctor(
                                                    std::make_unique<InplaceOrViewKernel>(this))));
}

void OpCore::inplace_or_view_kernel(const c10::OperatorHandle& h, c10::DispatchKeySet ks,
                                    torch::jit::Stack* stack) const {
  // The written tensors, taken before the kernel consumes the arguments.
  c10::SmallVector<at::Tensor, 4> written;
  const size_t n = args_.size();
  for (size_t i = 0; i < n; ++i) {
    if (!args_[i].written) continue;
    const auto& v = (*stack)[stack->size() - n + i];
    if (!v.isTensor() || !v.toTensor().defined()) continue;  // the device kernel names it
    // NB: an inference tensor has no version counter (not bumped below); the device kernel
    // refuses to write one outside InferenceMode (check_written_args), before any write.
    written.push_back(v.toTensor());
  }
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    h.redispatchBoxed(ks & c10::after_ADInplaceOrView_keyset, stack);
  }
  for (const at::Tensor& t : written) {
    if (!t.is_inference()) torch::autograd::impl::bump_version(t);
  }
}

void OpCore::check_written_args(c10::DeviceType /*device*/, const torch::jit::Stack& stack) const {
  const std::vector<NamedTensor> tensors = tensors_of(args_, stack);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const NamedTensor& w = tensors[i];
    if (!w.written) continue;
    // torch refuses an in-place write to an inference tensor outside InferenceMode. Checked
    // here, where every call arrives: a call whose tensors are all inference tensors has no
    // ADInplaceOrView key, so no kernel above the device one sees it.
    TORCH_CHECK(!w.tensor.is_inference() || c10::InferenceMode::is_enabled(), name_, ": ", w.what(),
                " is written in place but is an inference tensor (made under "
                "torch.inference_mode) and this call is outside InferenceMode; inference "
                "tensors cannot be written there. Clone it outside InferenceMode first");
    TORCH_CHECK(at::has_internal_overlap(w.tensor) != at::MemOverlap::Yes, name_, ": ", w.what(),
                " is written in place, but several of its elements share one memory location (",
                describe(w.tensor),
                ": an expanded or stride-0 tensor), so the result would depend on the order of "
                "the writes. Pass a tensor with its own memory (x.contiguous() or x.clone())");
    for (size_t j = 0; j < tensors.size(); ++j) {
      if (j == i || (tensors[j].written && j < i)) continue;  // each written pair once
      const char* shared = shared_memory(w.tensor, tensors[j].tensor);
      TORCH_CHECK(shared == nullptr, name_, ": ", w.what(), " is written in place, but it ", shared,
                  " memory with ", tensors[j].what(),
                  w.tensor.is_same(tensors[j].tensor) ? " (the same tensor)" : "",
                  std::string_view(shared == nullptr ? "" : shared) == "may share"
                      ? " (their byte ranges in one storage overlap; interleaved strided views "
                        "cannot be told apart here)"
                      : "",
                  "; the kernel could read values it has already overwritten, or write one "
                  "location twice. Pass separate tensors (clone one of them)");
    }
  }
}

void OpCore::check_written_args_autograd(const torch::jit::Stack& stack) const {
  const size_t n = args_.size();
  for (size_t i = 0; i < n; ++i) {
    if (!args_[i].written) continue;
    const auto& v = stack[stack.size() - n + i];
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const at::Tensor& t = v.toTensor();
    TORCH_CHECK(!t.requires_grad(), name_, ": argument '", args_[i].name,
                "' is written in place but requires grad; customop does not differentiate "
                "through an in-place write (the written values would carry no gradient "
                "history, and gradients through them would be silently wrong). Write into a "
                "tensor that does not require grad (x.detach().clone()), or call the op under "
                "torch.no_grad() if the write should not be differentiated");
    TORCH_CHECK(!t.is_view() || !t._base().requires_grad(), name_, ": argument '", args_[i].name,
                "' is written in place but is a view of a tensor that requires grad (its base, ",
                describe(t._base()),
                "); the write would change that tensor behind autograd's back. Write into a "
                "tensor that does not require grad, or call the op under torch.no_grad()");
  }
}

}  // namespace customop
