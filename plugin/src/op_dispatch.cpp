// Dispatcher registration and the indirection kernels: one boxed kernel per device (CPU,
// CUDA, Meta) that calls whatever kernel is registered now (atomically published), the
// Autograd indirection, the Tracer kernel for non-tensor returns, and the
// CompositeExplicitAutograd kernel for calls with no tensor to dispatch on.

#include "op_core_internal.h"

#include <c10/util/Exception.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>

#include <optional>
#include <sstream>

namespace customop {

using detail::check_tensor_args_defined;

namespace {

const char* device_name(c10::DeviceType d) {
  switch (d) {
    case c10::DeviceType::CUDA: return "CUDA";
    case c10::DeviceType::Meta: return "fake (Meta)";
    default: return "CPU";
  }
}

// The kernel slot of a device: CPU 0, CUDA 1, Meta (the fake kernel) 2.
size_t kernel_slot(c10::DeviceType d) {
  switch (d) {
    case c10::DeviceType::CUDA: return 1;
    case c10::DeviceType::Meta: return 2;
    default: return 0;
  }
}

constexpr c10::DeviceType kKernelDevices[] = {c10::DeviceType::CPU, c10::DeviceType::CUDA,
                                              c10::DeviceType::Meta};

}  // namespace

// ---- dispatcher registration -------------------------------------------------------------

struct DeviceKernel final : c10::OperatorKernel {
  DeviceKernel(OpCore* op, c10::DeviceType device) : op_(op), device_(device) {}
  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    op_->device_kernel(device_, stack);
  }
  OpCore* op_;
  c10::DeviceType device_;
};

// A call with no tensor to dispatch on (every Tensor argument None, every Tensor[] empty)
// gets an empty dispatch key set; the dispatcher then runs the CompositeExplicitAutograd
// kernel, or says only "There were no tensor arguments to this function". So does a call on
// a backend other than CPU, CUDA and Meta. This kernel names the op and the argument instead.
struct NoBackendKernel final : c10::OperatorKernel {
  explicit NoBackendKernel(const OpCore* op) : op_(op) {}
  [[noreturn]] void operator()(const c10::OperatorHandle&, c10::DispatchKeySet,
                               torch::jit::Stack* stack);
  const OpCore* op_;
};

// NB: torch's generic Tracer fallback refuses ops with a non-tensor return ("unsupported
// output type: int"); ops with one get this kernel, which records the node itself and leaves
// the non-tensor output untraced (a constant for whatever uses it later).
struct TracerKernel final : c10::OperatorKernel {
  explicit TracerKernel(const OpCore* op) : op_(op) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    op_->tracer_kernel(h, ks, stack);
  }
  const OpCore* op_;
};

struct AutogradKernel final : c10::OperatorKernel {
  explicit AutogradKernel(OpCore* op) : op_(op) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    op_->autograd_kernel(h, ks, stack);
  }
  OpCore* op_;
};

namespace {
std::string unqualified(const std::string& name) { return name.substr(name.find("::") + 2); }

std::unique_ptr<torch::Library> make_fragment(const std::string& ns,
                                              const std::source_location& loc) {
  return std::make_unique<torch::Library>(torch::Library::FRAGMENT, ns, std::nullopt,
                                          loc.file_name(), loc.line());
}

c10::DispatchKey dispatch_key_for(c10::DeviceType d) {
  switch (d) {
    case c10::DeviceType::CUDA: return c10::DispatchKey::CUDA;
    case c10::DeviceType::Meta: return c10::DispatchKey::Meta;
    default: return c10::DispatchKey::CPU;
  }
}
}  // namespace

void OpCore::register_with_dispatcher() {
  auto lib = make_fragment(ns_, loc_);
  std::ostringstream schema_text;
  schema_text << schema_;
  lib->def(schema_text.str().c_str());
  handle_ = c10::Dispatcher::singleton().findSchemaOrThrow(name_.c_str(), "");
  // NB: the Meta indirection is installed even without a fake kernel, so that FakeTensor
  // (torch.compile, torch.export) reaches device_kernel's error naming the op and impl_fake
  // instead of torch's generic "does not support running with fake tensors".
  for (auto device : kKernelDevices) {
    lib->impl(unqualified(name_).c_str(),
              torch::dispatch(dispatch_key_for(device),
                              torch::CppFunction::makeFromBoxedFunctor(
                                  std::make_unique<DeviceKernel>(this, device))));
    device_indirection_installed_[kernel_slot(device)] = true;
  }
  lib->impl(unqualified(name_).c_str(),
            torch::dispatch(
                c10::DispatchKey::CompositeExplicitAutograd,
                torch::CppFunction::makeFromBoxedFunctor(std::make_unique<NoBackendKernel>(this))));
  const bool non_tensor_return = std::any_of(returns_.begin(), returns_.end(), [](ArgKind k) {
    return k != ArgKind::kTensor && k != ArgKind::kTensorList;
  });
  if (non_tensor_return) {
    lib->impl(unqualified(name_).c_str(),
              torch::dispatch(c10::DispatchKey::Tracer, torch::CppFunction::makeFromBoxedFunctor(
                                                            std::make_unique<TracerKernel>(this))));
  }
  if (mutates_) install_inplace_or_view_kernel(*lib);
  libraries_.push_back(std::move(lib));
  install_autograd_indirection();
}

void OpCore::tracer_kernel(const c10::OperatorHandle& h, c10::DispatchKeySet ks,
                           torch::jit::Stack* stack) const {
  namespace tracer = torch::jit::tracer;
  const auto below =
      ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Tracer);
  if (!tracer::isTracing()) {
    h.redispatchBoxed(below, stack);
    return;
  }
  // NB: a copy, not a reference: getTracingState() returns a reference to the thread-local
  // state, which is reset below while the kernel runs untraced.
  auto state = tracer::getTracingState();  // NOLINT(performance-unnecessary-copy-initialization)
  auto& graph = state->graph;
  torch::jit::Node* node = graph->create(c10::Symbol::fromQualString(name_), /*num_outputs=*/0);
  tracer::recordSourceLocation(node);
  const size_t n = args_.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& v = (*stack)[stack->size() - n + i];
    const char* arg = args_[i].name.c_str();
    switch (args_[i].kind) {
      case ArgKind::kTensor: tracer::addInputs(node, arg, v.toTensor()); break;
      case ArgKind::kOptionalTensor:
        tracer::addInputs(node, arg, v.toOptional<at::Tensor>());
        break;
      case ArgKind::kTensorList: tracer::addInputs(node, arg, v.toTensorVector()); break;
      default: node->addInput(graph->insertConstant(v)); break;
    }
  }
  graph->insertNode(node);
  tracer::setTracingState(nullptr);
  try {
    h.redispatchBoxed(below, stack);
  } catch (...) {
    tracer::setTracingState(state);
    throw;
  }
  tracer::setTracingState(state);
  const size_t m = returns_.size();
  for (size_t i = 0; i < m; ++i) {
    const auto& v = (*stack)[stack->size() - m + i];
    switch (returns_[i]) {
      case ArgKind::kTensor: tracer::addOutput(node, v.toTensor()); break;
      case ArgKind::kTensorList: tracer::addOutput(node, v.toTensorVector()); break;
      case ArgKind::kInt: node->addOutput()->setType(c10::IntType::get()); break;
      case ArgKind::kFloat: node->addOutput()->setType(c10::FloatType::get()); break;
      default: node->addOutput()->setType(c10::BoolType::get()); break;
    }
  }
}

void OpCore::install_autograd_indirection() {
  if (autograd_indirection_installed_) return;
  auto lib = make_fragment(ns_, loc_);
  lib->impl(unqualified(name_).c_str(),
            torch::dispatch(
                c10::DispatchKey::Autograd,
                torch::CppFunction::makeFromBoxedFunctor(std::make_unique<AutogradKernel>(this))));
  libraries_.push_back(std::move(lib));
  autograd_indirection_installed_ = true;
}

// ---- kernels -----------------------------------------------------------------------------

bool OpCore::has_kernel(c10::DeviceType device) const {
  const bool known = device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA ||
                     device == c10::DeviceType::Meta;
  return known && kernels_[kernel_slot(device)].load(std::memory_order_acquire) != nullptr;
}

void OpCore::set_kernel(c10::DeviceType device, detail::BoxedKernel fn, std::source_location loc) {
  TORCH_CHECK_VALUE(device != c10::DeviceType::Meta, name_,
                    ": impl() does not take c10::DeviceType::Meta; register the fake kernel with "
                    "op.impl_fake(kernel) (at ",
                    format_location(loc), ")");
  TORCH_CHECK_VALUE(device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA, name_,
                    ": impl() takes c10::DeviceType::CPU or c10::DeviceType::CUDA, got ",
                    c10::DeviceTypeName(device), " (at ", format_location(loc), ")");
  install_kernel(device, std::move(fn), loc);
}

void OpCore::set_fake_kernel(detail::BoxedKernel fn, std::source_location loc) {
  install_kernel(c10::DeviceType::Meta, std::move(fn), loc);
}

void OpCore::install_kernel(c10::DeviceType device, detail::BoxedKernel fn,
                            std::source_location loc) {
  const size_t slot_index = kernel_slot(device);
  auto& slot = kernels_[slot_index];
  const char* what = device == c10::DeviceType::Meta ? "impl_fake" : "impl";
  if (const auto* first = slot.load()) {
    TORCH_CHECK(false, name_, ": a ", device_name(device), " ", what, " is already registered at ",
                format_location(first->loc), "; the second one at ", format_location(loc),
                " is refused (one per device)");
  }
  if (!device_indirection_installed_[slot_index]) {
    TORCH_CHECK(!handle_->hasKernelForDispatchKey(dispatch_key_for(device)), name_,
                ": already has a ", device_name(device), " kernel registered outside customop (",
                handle_->debug(), "); the ", what, " at ", format_location(loc), " is refused");
    auto lib = make_fragment(ns_, loc);
    lib->impl(unqualified(name_).c_str(),
              torch::dispatch(dispatch_key_for(device),
                              torch::CppFunction::makeFromBoxedFunctor(
                                  std::make_unique<DeviceKernel>(this, device))));
    libraries_.push_back(std::move(lib));
    device_indirection_installed_[slot_index] = true;
  }
  kernel_storage_.push_back(
      std::make_unique<detail::KernelEntry>(detail::KernelEntry{std::move(fn), loc}));
  slot.store(kernel_storage_.back().get());
}

namespace detail {

thread_local const torch::jit::Stack* ArgsCheckedScope::current_ = nullptr;

void check_tensor_args_defined(const std::string& name_, const std::vector<ArgSpec>& args_,
                               const torch::jit::Stack& stack) {
  const size_t n = args_.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& v = stack[stack.size() - n + i];
    if (args_[i].kind == ArgKind::kTensor) {
      TORCH_CHECK_TYPE(v.isTensor() && v.toTensor().defined(), name_, ": argument '", args_[i].name,
                       "' (Tensor) expected a tensor, got None");
    } else if (args_[i].kind == ArgKind::kTensorList && v.isTensorList()) {
      const auto list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        TORCH_CHECK_TYPE(list.get(k).defined(), name_, ": argument '", args_[i].name,
                         "' (Tensor[]) element ", k, " expected a tensor, got None");
      }
    }
  }
}

}  // namespace detail

void NoBackendKernel::operator()(const c10::OperatorHandle&, c10::DispatchKeySet,
                                 torch::jit::Stack* stack) {
  const std::string& name = op_->name();
  const std::vector<ArgSpec>& args = op_->args();
  check_tensor_args_defined(name, args, *stack);
  std::string empty_lists;
  const size_t n = args.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& v = (*stack)[stack->size() - n + i];
    std::optional<at::Tensor> t;
    if (v.isTensor()) t = v.toTensor();
    if (v.isTensorList() && !v.toTensorList().empty()) t = v.toTensorList().get(0);
    // NB: also reached for a dense tensor with a key customop has no kernel for (sparse,
    // quantized, nested): the message names layout and dtype as well as the device.
    TORCH_CHECK_NOT_IMPLEMENTED(!t.has_value(), name, ": argument '", args[i].name, "' is a ",
                                t ? t->toString() : std::string(), " (layout ",
                                t ? t->layout() : c10::kStrided,
                                "), but customop ops run on dense (strided) CPU, CUDA and Meta "
                                "tensors only");
    if (v.isTensorList()) empty_lists += (empty_lists.empty() ? "'" : ", '") + args[i].name + "'";
  }
  TORCH_CHECK(false, name, ": no tensor to run on: ",
              empty_lists.empty() ? std::string("every Tensor argument is None")
                                  : "argument " + empty_lists + " (Tensor[]) is an empty list",
              ", so the call has no device to run on; pass at least one tensor");
}

void OpCore::device_kernel(c10::DeviceType device, torch::jit::Stack* stack) const {
  const auto* entry = kernels_[kernel_slot(device)].load(std::memory_order_acquire);
  if (entry == nullptr && device == c10::DeviceType::Meta && returns_.empty()) {
    // A `-> ()` op (it only writes its arguments) has nothing to compute on meta tensors: its
    // fake kernel is trivial unless it registers one to check its arguments.
    if (!detail::ArgsCheckedScope::checked(stack)) check_tensor_args_defined(name_, args_, *stack);
    kernel_arg_storages(device, *stack);  // refuses meta mixed with real tensors
    check_written_args(device, *stack);
    torch::jit::drop(*stack, args_.size());
    return;
  }
  if (entry == nullptr) {
    // NB: a RuntimeError, not NotImplementedError, for Meta: FakeTensor turns the latter into
    // its generic UnsupportedOperatorException, which would drop the op's name and the fix.
    TORCH_CHECK(device != c10::DeviceType::Meta, name_,
                ": no fake (Meta) kernel registered, so the op cannot run on meta tensors, "
                "under FakeTensor, torch.compile or torch.export. Register one with "
                "op.impl_fake(kernel) (customop/op.h): kernel(const Args&) returns outputs of "
                "the right shapes, dtypes and strides without reading data, e.g. "
                "at::empty_symint(args.x.sym_sizes(), args.x.options())");
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, name_, ": no ", device_name(device),
        " impl registered. Register one with op.impl(c10::DeviceType::", device_name(device),
        ", kernel) (customop/op.h) before calling the op on ", device_name(device), " tensors");
  }
  if (!detail::ArgsCheckedScope::checked(stack)) check_tensor_args_defined(name_, args_, *stack);
  // The arguments' storages, for the alias check of the outputs (and, for Meta, no real tensor
  // among meta ones): op_kernel_returns.cpp.
  const detail::ArgStorages arg_storages = kernel_arg_storages(device, *stack);
  if (mutates_) check_written_args(device, *stack);
  try {
    entry->fn(stack);
  } catch (...) {
    if (!has_shape()) detail::rethrow_naming_op(name_, detail::kernel_role(device), &entry->loc);
    // With a shape function, the fake kernel is the shape function, and a real kernel runs it
    // first (to allocate the outputs it fills).
    if (device == c10::DeviceType::Meta) {
      detail::rethrow_naming_op(name_, "shape function", &entry->loc);
    }
    detail::rethrow_naming_op(
        name_,
        std::string(detail::kernel_role(device)) + " at " + format_location(entry->loc) +
            " (or the shape function it runs, at " + format_location(*shape_loc_) + ")",
        nullptr);
  }
  if (!returns_.empty()) check_kernel_returns(device, *entry, arg_storages, *stack);
}

}  // namespace customop
