// The out= overload every op with a shape function gets: `ns::name.out(<the op's arguments>,
// *, Tensor(a!) out) -> ()` (one out argument per return, named after the returns when
// they have names). It is not tagged at::Tag::out (see define_out_overload).
//
// One kernel serves both: the functional op allocates its outputs from the shape function and
// calls the out kernel on them; the out= overload checks the caller's buffers (dtype, device,
// memory shared with an input), resizes them when their sizes differ (torch's out=
// convention), and calls the same out kernel on them directly when their strides are the ones
// the shape function states, else on fresh tensors that it then copies in. It is not
// differentiable: a call under grad mode with an argument that requires grad is refused.

#include "op_core_internal.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

#include <set>
#include <sstream>

namespace customop {

namespace {

enum OutKey : int { kOutCpu = 0, kOutCuda = 1, kOutMeta = 2, kOutAutograd = 3, kOutInplace = 4 };

size_t out_slot(c10::DeviceType d) {
  return d == c10::DeviceType::CUDA ? 1 : d == c10::DeviceType::Meta ? 2 : 0;
}

std::string alias_letter(size_t i) {
  // a, b, ..., z, a1, b1, ...: alias sets only need distinct names.
  std::string s(1, static_cast<char>('a' + i % 26));
  if (i >= 26) s += std::to_string(i / 26);
  return s;
}

}  // namespace

struct OutVariantKernel final : c10::OperatorKernel {
  OutVariantKernel(const OpCore* op, int key) : op_(op), key_(key) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    op_->out_kernel(key_, h, ks, stack);
  }
  const OpCore* op_;
  int key_;
};

void check_out_schema(const c10::FunctionSchema& functional, const c10::FunctionSchema& out) {
  const std::string name = out.name() + "." + out.overload_name();
  const auto& fa = functional.arguments();
  const auto& oa = out.arguments();
  const size_t n_out = functional.returns().size();
  TORCH_CHECK_VALUE(n_out > 0, name, ": an out= overload needs a functional op with returns (",
                    functional, ")");
  TORCH_CHECK_VALUE(oa.size() == fa.size() + n_out, name, ": takes ", oa.size(),
                    " arguments; an out= overload of ", functional, " takes its ", fa.size(),
                    " arguments and one out tensor per return (", n_out, ")");
  for (size_t i = 0; i < fa.size(); ++i) {
    TORCH_CHECK_VALUE(oa[i].name() == fa[i].name() && *oa[i].type() == *fa[i].type(), name,
                      ": argument ", i, " is '", oa[i].name(), "' (", oa[i].type()->str(),
                      "), the functional op's is '", fa[i].name(), "' (", fa[i].type()->str(), ")");
    TORCH_CHECK_VALUE(oa[i].alias_info() == nullptr || !oa[i].alias_info()->isWrite(), name,
                      ": argument '", oa[i].name(),
                      "' is written; an out= overload writes its out arguments only");
  }
  std::set<c10::Symbol> sets;
  const auto& rets = out.returns();
  TORCH_CHECK_VALUE(rets.empty() || rets.size() == n_out, name, ": returns ", rets.size(),
                    " values; an out= overload returns nothing or its ", n_out, " out tensor(s)");
  for (size_t k = 0; k < n_out; ++k) {
    const auto& a = oa[fa.size() + k];
    const auto* alias = a.alias_info();
    TORCH_CHECK_VALUE(a.kwarg_only(), name, ": out argument '", a.name(),
                      "' must be keyword-only (after '*')");
    TORCH_CHECK_VALUE(a.type()->kind() == c10::TypeKind::TensorType, name, ": out argument '",
                      a.name(), "' must be a Tensor, not ", a.type()->str());
    TORCH_CHECK_VALUE(alias != nullptr && alias->isWrite() && alias->beforeSets().size() == 1, name,
                      ": out argument '", a.name(),
                      "' must be written in its own alias set (Tensor(a!))");
    const c10::Symbol set = *alias->beforeSets().begin();
    TORCH_CHECK_VALUE(sets.insert(set).second, name, ": out argument '", a.name(),
                      "' shares its alias set with another out argument");
    if (rets.empty()) continue;
    const auto* ralias = rets[k].alias_info();
    TORCH_CHECK_VALUE(ralias != nullptr && ralias->isWrite() && ralias->beforeSets().size() == 1 &&
                          *ralias->beforeSets().begin() == set,
                      name, ": return ", k, " must be out argument '", a.name(),
                      "' itself, annotated with its alias set (Tensor(", set.toUnqualString(),
                      "!))");
  }
}

void OpCore::note_shape(std::source_location loc) {
  shape_loc_ = loc;
  if (!mutates_ && !wrapped_ && !out_handle_) define_out_overload(loc);
}

void OpCore::define_out_overload(const std::source_location& loc) {
  const auto& rets = schema_.returns();
  // Out arguments take the returns' names where each is a distinct name no argument has.
  std::set<std::string> taken;
  for (const auto& a : schema_.arguments()) taken.insert(a.name());
  bool named = rets.size() > 1;
  for (const auto& r : rets) named = named && !r.name().empty() && taken.insert(r.name()).second;
  out_names_.clear();
  for (size_t k = 0; k < rets.size(); ++k) {
    out_names_.push_back(named              ? rets[k].name()
                         : rets.size() == 1 ? std::string("out")
                                            : "out" + std::to_string(k));
  }
  std::ostringstream text;
  text << schema_.name() << ".out(";
  bool keyword = false;
  for (size_t i = 0; i < schema_.arguments().size(); ++i) {
    const auto& a = schema_.arguments()[i];
    if (a.kwarg_only() && !keyword) {
      text << (i ? ", " : "") << "*";
      keyword = true;
    }
    text << (i || keyword ? ", " : "") << a;
  }
  text << (schema_.arguments().empty() && !keyword ? "" : ", ") << (keyword ? "" : "*, ");
  for (size_t k = 0; k < rets.size(); ++k) {
    text << (k ? ", " : "") << "Tensor(" << alias_letter(k) << "!) " << out_names_[k];
  }
  // NB: it returns nothing, which torch's rules for out variants allow: torch.compile
  // (Dynamo, AOTAutograd) refuses a custom op whose returns carry alias annotations, and
  // `-> ()` ops compile as ops that write their arguments.
  text << ") -> ()";
  c10::FunctionSchema out_schema = torch::schema(text.str().c_str());
  check_out_schema(schema_,
                   out_schema);  // NB: our own construction obeys the rules we ask of others
  auto lib = std::make_unique<torch::Library>(torch::Library::FRAGMENT, ns_, std::nullopt,
                                              loc.file_name(), loc.line());
  // NB: not tagged at::Tag::out. With the tag, torch 2.15's Inductor lowers the functional op
  // to this overload (ExternKernelOut), and its AOTInductor C++ wrapper then calls a C shim
  // named aoti_torch_cpu_<op>, which exists for ATen ops only: every AOTI package of a model
  // using the op failed to compile (tests/python/test_pt2.py, 2026-12-05). Untagged, compiled
  // code calls the functional op, and the overload serves eager callers and the harness.
  lib->def(std::move(out_schema));
  const std::string overload = name_.substr(name_.find("::") + 2) + ".out";
  detail::impl_at_keys(
      *lib, overload,
      {{c10::DispatchKey::CPU, kOutCpu},
       {c10::DispatchKey::CUDA, kOutCuda},
       {c10::DispatchKey::Meta, kOutMeta},
       {c10::DispatchKey::Autograd, kOutAutograd},
       {c10::DispatchKey::ADInplaceOrView, kOutInplace}},
      [this](int index) { return std::make_unique<OutVariantKernel>(this, index); });
  libraries_.push_back(std::move(lib));
  out_handle_ = c10::Dispatcher::singleton().findSchemaOrThrow(name_.c_str(), "out");
}

void OpCore::set_out_kernel(c10::DeviceType device, detail::BoxedKernel fn,
                            std::source_location loc) {
  auto& slot = out_kernels_[out_slot(device)];
  TORCH_CHECK(slot.load() == nullptr, name_, ": the ", c10::DeviceTypeName(device),
              " out= kernel is already registered; the one at ", format_location(loc),
              " is refused");
  kernel_storage_.push_back(
      std::make_unique<detail::KernelEntry>(detail::KernelEntry{std::move(fn), loc}));
  slot.store(kernel_storage_.back().get(), std::memory_order_release);
}

bool OpCore::prepare_out_buffer(std::size_t i, const at::Tensor& out,
                                const TensorSpec& spec) const {
  const std::string op = name_ + ".out";
  const std::string& out_name = out_names_.at(i);
  TORCH_CHECK(out.scalar_type() == spec.dtype, op, ": out argument '", out_name, "' has dtype ",
              out.scalar_type(), ", expected ", spec.dtype,
              " (the dtype of the functional op's result)");
  TORCH_CHECK(out.is_meta() || out.device() == spec.device, op, ": out argument '", out_name,
              "' is on ", out.device(), ", expected ", spec.device);
  const c10::SymIntArrayRef sizes(spec.sizes);
  if (out.sym_sizes() != sizes) {
    if (out.sym_numel() != 0) {
      TORCH_WARN(op, ": out argument '", out_name, "' has sizes ", out.sym_sizes(),
                 " and was resized to ", sizes,
                 "; pass an empty tensor (or one of the right sizes) to avoid this");
    }
    out.resize__symint(sizes);
  }
  return detail::has_spec_strides(out, spec);
}

bool detail::has_spec_strides(const at::Tensor& t, const TensorSpec& spec) {
  if (!spec.strides) return t.is_contiguous();
  for (size_t d = 0; d < spec.sizes.size(); ++d) {
    if (spec.sizes[d] != 1 && t.sym_stride(static_cast<int64_t>(d)) != (*spec.strides)[d]) {
      return false;
    }
  }
  return true;
}

void OpCore::out_kernel(int key, const c10::OperatorHandle& h, c10::DispatchKeySet ks,
                        torch::jit::Stack* stack) const {
  const size_t n_out = out_names_.size();
  const size_t n = args_.size() + n_out;
  auto arg = [&](size_t i) -> const c10::IValue& { return (*stack)[stack->size() - n + i]; };
  auto arg_name = [&](size_t i) {
    return i < args_.size() ? args_[i].name : out_names_[i - args_.size()];
  };
  if (key == kOutAutograd) {
    if (c10::GradMode::is_enabled()) {
      for (size_t i = 0; i < n; ++i) {
        std::vector<at::Tensor> ts;
        if (arg(i).isTensor()) ts.push_back(arg(i).toTensor());
        if (arg(i).isTensorList()) ts = arg(i).toTensorVector();
        for (const auto& t : ts) {
          TORCH_CHECK(!t.defined() || !t.requires_grad(), name_,
                      ".out: out= does not support automatic differentiation, but argument '",
                      arg_name(i), "' requires grad. Call the functional op ", name_,
                      " to differentiate, or call this one under torch.no_grad()");
        }
      }
    }
    at::AutoDispatchBelowAutograd guard;
    h.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
    return;
  }
  if (key == kOutInplace) {
    c10::SmallVector<at::Tensor, 2> outs;
    for (size_t k = 0; k < n_out; ++k) {
      const auto& v = arg(args_.size() + k);
      if (v.isTensor() && v.toTensor().defined()) outs.push_back(v.toTensor());
    }
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      h.redispatchBoxed(ks & c10::after_ADInplaceOrView_keyset, stack);
    }
    for (const auto& t : outs) {
      if (!t.is_inference()) torch::autograd::impl::bump_version(t);
    }
    return;
  }
  const c10::DeviceType device = key == kOutCuda   ? c10::DeviceType::CUDA
                                 : key == kOutMeta ? c10::DeviceType::Meta
                                                   : c10::DeviceType::CPU;
  detail::check_tensor_args_defined(
      name_, args_,
      torch::jit::Stack(stack->end() - static_cast<std::ptrdiff_t>(n),
                        stack->end() - static_cast<std::ptrdiff_t>(n_out)));
  // Every input tensor (list elements too), named, for the checks below.
  std::vector<std::pair<at::Tensor, std::string>> inputs;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (arg(i).isTensor() && arg(i).toTensor().defined()) {
      inputs.emplace_back(arg(i).toTensor(), "argument '" + args_[i].name + "'");
    } else if (arg(i).isTensorList()) {
      const auto list = arg(i).toTensorVector();
      for (size_t e = 0; e < list.size(); ++e) {
        inputs.emplace_back(list[e],
                            "argument '" + args_[i].name + "' element " + std::to_string(e));
      }
    }
  }
  std::vector<at::Tensor> outs;
  for (size_t k = 0; k < n_out; ++k) {
    const auto& v = arg(args_.size() + k);
    TORCH_CHECK_VALUE(v.isTensor() && v.toTensor().defined(), name_, ".out: out argument '",
                      out_names_[k], "' is None; pass a tensor");
    outs.push_back(v.toTensor());
  }
  // Every out on the inputs' device: the dispatcher picks one kernel for the call, so an out
  // on another device (meta among CPU tensors) would get the wrong kernel and no values.
  const c10::Device where = inputs.empty() ? outs[0].device() : inputs[0].first.device();
  for (size_t k = 0; k < n_out; ++k) {
    const at::Tensor& o = outs[k];
    TORCH_CHECK(
        o.device() == where, name_, ".out: out argument '", out_names_[k], "' is on ", o.device(),
        ", expected ", where, " (the device of ",
        inputs.empty() ? std::string("out argument '" + out_names_[0] + "'") : inputs[0].second,
        ")");
    TORCH_CHECK(!o.is_inference() || c10::InferenceMode::is_enabled(), name_,
                ".out: out argument '", out_names_[k],
                "' is an inference tensor (made under torch.inference_mode) and this call is "
                "outside InferenceMode, where inference tensors cannot be written; clone it "
                "outside InferenceMode first");
    TORCH_CHECK(
        device == c10::DeviceType::Meta || at::has_internal_overlap(o) != at::MemOverlap::Yes,
        name_, ".out: out argument '", out_names_[k],
        "' has several elements in one memory location (sizes ", o.sizes(), ", strides ",
        o.strides(), ": expanded or stride 0); pass a buffer with its own memory");
    // A buffer that shares memory with an input would be read after it was written (and a
    // resize could move it over the input). Meta tensors have no addresses: the same storage
    // is what counts there; elsewhere torch's exact answer, and the same storage when torch
    // cannot tell (a non-dense or expanded tensor).
    auto shares = [&](const at::Tensor& other) {
      const bool same_storage =
          o.has_storage() && other.has_storage() && o.storage().is_alias_of(other.storage());
      if (device == c10::DeviceType::Meta) return same_storage;
      const auto status = at::get_overlap_status(o, other);
      return status == at::MemOverlapStatus::Full || status == at::MemOverlapStatus::Partial ||
             (status == at::MemOverlapStatus::TooHard && same_storage);
    };
    for (const auto& [t, what] : inputs) {
      TORCH_CHECK(!shares(t), name_, ".out: out argument '", out_names_[k], "' shares memory with ",
                  what, "; pass a separate buffer");
    }
    for (size_t j = 0; j < k; ++j) {
      TORCH_CHECK(!shares(outs[j]), name_, ".out: out arguments '", out_names_[j], "' and '",
                  out_names_[k], "' share memory; pass separate buffers");
    }
  }
  out_device_kernel(device, stack);
  // NB: the schema returns nothing (see define_out_overload); the typed kernel leaves the out
  // tensors on the stack.
  stack->erase(stack->end() - static_cast<std::ptrdiff_t>(n_out), stack->end());
}

void OpCore::out_device_kernel(c10::DeviceType device, torch::jit::Stack* stack) const {
  const auto* entry = out_kernels_[out_slot(device)].load(std::memory_order_acquire);
  TORCH_CHECK(entry != nullptr, name_, ".out: no ", c10::DeviceTypeName(device),
              " kernel: the op's ", c10::DeviceTypeName(device),
              " kernel is not an out kernel (kernel(const Args&, outputs)), or none is "
              "registered");
  entry->fn(stack);
}

}  // namespace customop
