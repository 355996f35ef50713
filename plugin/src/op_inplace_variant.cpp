// The in-place variant an op may declare (Op::inplace_variant): `ns::name_(Tensor(a!) x,
// <the op's other arguments>) -> Tensor(a!)`, tagged at::Tag::inplace, where x is the op's first
// argument and the result, which must have x's sizes and dtype, is written into it.
//
// One kernel serves both: the in-place variant runs the functional op (its shape function and
// kernel, on every device, Meta included) and copies the result into x. Nothing is written
// before the result exists and fits, so a refused call leaves x unchanged, and x may share
// memory with another argument (the result is computed before x is written). Autograd (under
// grad mode, an argument that requires grad): refused by default; with
// InplaceGrad::kThroughFunctional, the Autograd kernel runs clone -> functional op -> copy_ at
// the top of the dispatcher, so every step records its own backward and the chain is the
// functional op's backward (inplace_autograd). Its ADInplaceOrView kernel bumps x's version.

#include "op_core_internal.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/forward_grad.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace customop {

namespace {

enum InplaceKey : int { kCompute = 0, kAutograd = 1, kBumpVersion = 2 };

}  // namespace

struct InplaceVariantKernel final : c10::OperatorKernel {
  InplaceVariantKernel(const OpCore* op, int key) : op_(op), key_(key) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    op_->inplace_kernel(key_, h, ks, stack);
  }
  const OpCore* op_;
  int key_;
};

namespace {

// {at::Tag::inplace} where this torch has the tag (2.12 and later), {} on torch 2.11, which
// lacks it.
template <class T>
auto inplace_tags(int) -> decltype(T::inplace, std::vector<T>{}) {
  return {T::inplace};
}
template <class T>
std::vector<T> inplace_tags(long) {
  return {};
}

// The bytes [first, second) that t's elements lie in (ATen strides are not negative); empty for
// a tensor without elements.
std::pair<std::uintptr_t, std::uintptr_t> byte_span(const at::Tensor& t) {
  const auto start = reinterpret_cast<std::uintptr_t>(t.const_data_ptr());
  if (t.numel() == 0) return {start, start};
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {start, start + static_cast<std::uintptr_t>((last + 1) * t.element_size())};
}

// The functional op's checks name the functional op; the context says which call the user made.
void add_variant_context(c10::Error& e, const std::string& variant, const std::string& functional,
                         const std::string& x) {
  e.add_context(c10::str("raised while ", variant, " ran ", functional,
                         " to compute the result it writes into '", x, "'; nothing was written"));
}

}  // namespace

void OpCore::define_inplace_variant(InplaceGrad grad, InplaceWrite write,
                                    const std::source_location& loc) {
  const std::string variant = name_ + "_";
  TORCH_CHECK_VALUE(!wrapped_ && !mutates_, name_, ": inplace_variant() (at ", format_location(loc),
                    ") needs a functional op defined with customop::define",
                    mutates_ ? " (this one writes its arguments already)" : "");
  TORCH_CHECK_VALUE(returns_.size() == 1 && returns_[0] == ArgKind::kTensor, name_,
                    ": inplace_variant() (at ", format_location(loc),
                    ") needs an op with one Tensor return, written into its first argument; "
                    "the schema is ",
                    schema_);
  TORCH_CHECK_VALUE(
      !args_.empty() && args_[0].kind == ArgKind::kTensor && !schema_.arguments()[0].kwarg_only(),
      name_, ": inplace_variant() (at ", format_location(loc),
      ") needs a first argument of type Tensor (positional, not optional): the "
      "result is written into it; the schema is ",
      schema_);
  TORCH_CHECK_VALUE(grad == InplaceGrad::kRefuse || grad == InplaceGrad::kThroughFunctional, name_,
                    ": inplace_variant() (at ", format_location(loc), ") got InplaceGrad value ",
                    static_cast<int>(grad), "; expected kRefuse or kThroughFunctional");
  TORCH_CHECK_VALUE(write == InplaceWrite::kCopy || write == InplaceWrite::kDirect, name_,
                    ": inplace_variant() (at ", format_location(loc), ") got InplaceWrite value ",
                    static_cast<int>(write), "; expected kCopy or kDirect");
  TORCH_CHECK(!inplace_handle_, name_, ": inplace_variant() is declared twice (again at ",
              format_location(loc), ")");
  TORCH_CHECK_VALUE(!c10::Dispatcher::singleton().findSchema({variant, ""}).has_value(), name_,
                    ": inplace_variant() (at ", format_location(loc), ") would define ", variant,
                    ", which is already registered");
  std::ostringstream text;
  text << variant << "(";
  const auto& args = schema_.arguments();
  bool keyword = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i == 0) {
      text << "Tensor(a!) " << args[0].name();
      continue;
    }
    text << ", ";
    if (args[i].kwarg_only() && !keyword) {
      text << "*, ";
      keyword = true;
    }
    text << args[i];
  }
  text << ") -> Tensor(a!)";
  auto lib = std::make_unique<torch::Library>(torch::Library::FRAGMENT, ns_, std::nullopt,
                                              loc.file_name(), loc.line());
  const std::vector<at::Tag> tags = inplace_tags<at::Tag>(0);
  lib->def(torch::schema(text.str().c_str()), tags);
  const std::string op = variant.substr(variant.find("::") + 2);
  detail::impl_at_keys(
      *lib, op,
      {{c10::DispatchKey::CPU, kCompute},
       {c10::DispatchKey::CUDA, kCompute},
       {c10::DispatchKey::Meta, kCompute},
       {c10::DispatchKey::Autograd, kAutograd},
       {c10::DispatchKey::ADInplaceOrView, kBumpVersion}},
      [this](int index) { return std::make_unique<InplaceVariantKernel>(this, index); });
  if (batch_rule_) detail::impl_inplace_batched(*lib, op, this);  // the functional op's rule
  libraries_.push_back(std::move(lib));
  inplace_grad_ = grad;
  inplace_write_ = write;
  inplace_handle_ = c10::Dispatcher::singleton().findSchemaOrThrow(variant.c_str(), "");
}

void OpCore::set_result_spec(std::function<TensorSpec(torch::jit::Stack&)> fn) {
  result_spec_ = std::move(fn);
}

// InplaceWrite::kDirect: the out kernel with x as its output, when that is safe and x has the
// result's exact layout; false (nothing done) sends the call down the copy path, which also
// gives the errors for an x that cannot hold the result.
// NB: CPU only. The CUDA kernels declare their input and output pointers __restrict__, which
// one buffer for both breaks; they keep the copy path until they are written (and checked on a
// GPU) for it.
bool OpCore::write_inplace_directly(const at::Tensor& self, torch::jit::Stack* stack) const {
  if (self.device().type() != c10::DeviceType::CPU) return false;
  if (!result_spec_ || out_handle_ == std::nullopt) return false;
  if (out_kernels_[0].load(std::memory_order_acquire) == nullptr) return false;  // the CPU slot
  const size_t n = args_.size();
  const auto x_bytes = byte_span(self);
  for (size_t i = 1; i < n; ++i) {
    const c10::IValue& v = (*stack)[stack->size() - n + i];
    std::vector<at::Tensor> ts;
    if (v.isTensor()) ts.push_back(v.toTensor());
    if (v.isTensorList()) ts = v.toTensorVector();
    for (const auto& t : ts) {
      // An undefined Tensor argument: the copy path's kernel refuses it with its TypeError.
      if (!t.defined()) return false;
      // The kernel would read elements of another argument that it has already overwritten.
      // By addresses, not storages: two tensors made over one buffer (from_blob, from_numpy,
      // DLPack) have different storages.
      const auto other = byte_span(t);
      if (x_bytes.first < other.second && other.first < x_bytes.second) return false;
    }
  }
  TensorSpec spec;
  try {
    try {
      spec = result_spec_(*stack);  // runs the op's checks (its shape function)
    } catch (...) {
      detail::rethrow_naming_op(name_, "shape function", shape_loc_ ? &*shape_loc_ : nullptr);
    }
  } catch (c10::Error& e) {
    add_variant_context(e, name_ + "_", name_, args_[0].name);
    throw;
  }
  if (spec.dtype != self.scalar_type() || spec.device != self.device() ||
      c10::SymIntArrayRef(spec.sizes) != self.sym_sizes()) {
    return false;
  }
  if (!detail::has_spec_strides(self, spec)) return false;
  torch::jit::Stack call(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
  call.emplace_back(self);
  try {
    out_device_kernel(c10::DeviceType::CPU, &call);  // leaves the out tensor, x
  } catch (c10::Error& e) {
    e.add_context(c10::str("raised while ", name_, "_ ran the out kernel of ", name_,
                           " writing into '", args_[0].name, "' directly (InplaceWrite::kDirect)"));
    throw;
  }
  torch::jit::drop(*stack, n);
  stack->emplace_back(self);
  return true;
}

void detail::check_result_fits(const std::string& variant, const std::string& functional,
                               const std::string& x, const at::Tensor& result,
                               const at::Tensor& self) {
  TORCH_CHECK(result.sym_sizes() == self.sym_sizes() && result.scalar_type() == self.scalar_type(),
              variant, ": argument '", x, "' receives the result, which must have its sizes and ",
              "dtype: the result of ", functional, " is ", result.sym_sizes(), " ",
              result.scalar_type(), ", argument '", x, "' is ", self.sym_sizes(), " ",
              self.scalar_type(), " (nothing was written); call ", functional);
}

namespace {

// torch refuses an in-place write to an inference tensor outside InferenceMode (it has no
// version counter); so does the variant, before anything is written. Checked on the device
// path too: a call whose tensors are all inference tensors reaches no Autograd kernel.
void check_writable_here(const std::string& variant, const std::string& x, const at::Tensor& self) {
  TORCH_CHECK(!self.is_inference() || c10::InferenceMode::is_enabled(), variant, ": argument '", x,
              "' is an inference tensor (made under torch.inference_mode) and this call is "
              "outside InferenceMode; inference tensors cannot be written there. Clone it "
              "outside InferenceMode first");
}

void check_not_expanded(const std::string& variant, const std::string& functional,
                        const std::string& x, const at::Tensor& self) {
  TORCH_CHECK(at::has_internal_overlap(self) != at::MemOverlap::Yes, variant, ": argument '", x,
              "' is expanded (a stride of 0, strides ", self.sym_strides(),
              "): several of its elements share memory, so it cannot hold the result; pass a "
              "tensor that owns its elements (.contiguous()) or call ",
              functional);
}

// Runs the functional op `functional` on `call` (autocast excluded: in-place ops keep x's dtype,
// as ATen's are not cast either), checks that its result fits `self` (x) before anything is
// written, copies it into x, and leaves x as the variant's result in place of its `n` arguments
// on `stack`.
void write_functional_result(const c10::OperatorHandle& functional, const std::string& variant,
                             const std::string& x, torch::jit::Stack call, const at::Tensor& self,
                             size_t n, torch::jit::Stack* stack) {
  try {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    functional.callBoxed(call);
  } catch (c10::Error& e) {
    add_variant_context(e, variant, functional.schema().name(), x);
    throw;
  }
  const at::Tensor result = call.at(0).toTensor();
  detail::check_result_fits(variant, functional.schema().name(), x, result, self);
  self.copy_(result);
  torch::jit::drop(*stack, n);
  stack->emplace_back(self);
}

}  // namespace

void OpCore::inplace_autograd(torch::jit::Stack* stack) const {
  const std::string variant = name_ + "_";
  const size_t n = args_.size();
  const at::Tensor self = (*stack)[stack->size() - n].toTensor();
  const std::string& x = args_[0].name;
  TORCH_CHECK_VALUE(self.defined(), variant, ": argument '", x,
                    "' is None; the in-place variant writes its result into it");
  TORCH_CHECK(has_autograd(), variant, ": an argument requires grad, but ", name_,
              " has no backward (impl_autograd) for the in-place variant to differentiate "
              "through; call it under torch.no_grad()");
  TORCH_CHECK(!(self.is_leaf() && self.requires_grad()), variant, ": argument '", x,
              "' is a leaf tensor that requires grad; writing it in place would replace the value "
              "its grad is taken for (torch refuses in-place writes to such leaves too). Pass a "
              "copy (x.clone()) or call ",
              name_);
  if (self.is_view()) {
    const at::TensorBase& base = self._base();
    TORCH_CHECK(!(base.is_leaf() && base.requires_grad()), variant, ": argument '", x,
                "' is a view of a leaf tensor that requires grad; writing it in place would "
                "replace the value that leaf's grad is taken for. Pass a copy (x.clone()) or "
                "call ",
                name_);
  }
  check_writable_here(variant, x, self);
  check_not_expanded(variant, name_, x, self);
  // clone -> functional op -> copy_, each from the top of the dispatcher, so autograd records
  // CloneBackward, the functional op's backward and CopyBackwards: the grads are the
  // functional op's, and x's new history is that chain.
  torch::jit::Stack call(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
  call[0] = self.clone();
  write_functional_result(*handle_, variant, x, std::move(call), self, n, stack);
}

void OpCore::inplace_kernel(int key, const c10::OperatorHandle& h, c10::DispatchKeySet ks,
                            torch::jit::Stack* stack) const {
  const std::string variant = name_ + "_";
  const size_t n = args_.size();
  auto arg = [&](size_t i) -> const c10::IValue& { return (*stack)[stack->size() - n + i]; };
  if (key == kAutograd) {
    // A tangent (forward-mode AD, torch.func.jvp) is differentiated like a grad: through the
    // functional op (whose JVP runs, and copy_ carries the tangent into x), or refused.
    const bool grad_mode = c10::GradMode::is_enabled();
    const bool fw_level = torch::autograd::ForwardADLevel::try_get_by_idx(0) != nullptr;
    if (grad_mode || fw_level) {
      for (size_t i = 0; i < n; ++i) {
        std::vector<at::Tensor> ts;
        if (arg(i).isTensor()) ts.push_back(arg(i).toTensor());
        if (arg(i).isTensorList()) ts = arg(i).toTensorVector();
        for (const auto& t : ts) {
          if (!t.defined()) continue;
          const bool wants_grad = grad_mode && t.requires_grad();
          const bool has_tangent = fw_level && t._fw_grad(/*level=*/0).defined();
          if (!wants_grad && !has_tangent) continue;
          if (inplace_grad_ == InplaceGrad::kThroughFunctional) {
            inplace_autograd(stack);
            return;
          }
          TORCH_CHECK(false, variant,
                      ": the in-place variant is not differentiable, but argument '", args_[i].name,
                      wants_grad ? "' requires grad" : "' carries a forward-mode tangent",
                      ". Call the functional op ", name_,
                      " to differentiate, or call this one under torch.no_grad() (or declare "
                      "op.inplace_variant(customop::InplaceGrad::kThroughFunctional))");
        }
      }
    }
    at::AutoDispatchBelowAutograd guard;
    h.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
    return;
  }
  if (key == kBumpVersion) {
    const at::Tensor self = arg(0).toTensor();
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      h.redispatchBoxed(ks & c10::after_ADInplaceOrView_keyset, stack);
    }
    if (self.defined() && !self.is_inference()) torch::autograd::impl::bump_version(self);
    return;
  }
  const at::Tensor self = arg(0).toTensor();
  const std::string& x = args_[0].name;
  TORCH_CHECK_VALUE(self.defined(), variant, ": argument '", x,
                    "' is None; the in-place variant writes its result into it");
  check_writable_here(variant, x, self);
  check_not_expanded(variant, name_, x, self);
  if (inplace_write_ == InplaceWrite::kDirect && write_inplace_directly(self, stack)) return;
  // The functional op on the same arguments (below ADInplaceOrView, as this kernel runs).
  torch::jit::Stack call(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
  write_functional_result(*handle_, variant, x, std::move(call), self, n, stack);
}

}  // namespace customop
