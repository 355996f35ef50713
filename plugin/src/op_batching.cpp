// Batching rules (Op::vmap, customop/batching.h): the declaration's checks against the schema,
// and the op's kernel at the FuncTorchBatched dispatch key, which runs the rule on the
// arguments batched at the current vmap level (torch.func's layer) and wraps the outputs
// back as batched tensors at that level. Below it (FuncTorchBatched excluded) the op runs as
// usual: autograd, autocast and the device kernels see plain (or outer-level) tensors.

#include "op_core_internal.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <ATen/functorch/DynamicLayer.h>
#include <ATen/functorch/PlumbingHelper.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace customop {

struct BatchedKernel final : c10::OperatorKernel {
  explicit BatchedKernel(const OpCore* op) : op_(op) {}
  void operator()(const c10::OperatorHandle& h, c10::DispatchKeySet /*ks*/,
                  torch::jit::Stack* stack) {
    op_->batched_kernel(h, stack);
  }
  const OpCore* op_;
};

void OpCore::set_batch_rule(BatchRule rule, std::source_location loc) {
  TORCH_CHECK(!batch_rule_.has_value(), name_, ": a batching rule is already declared at ",
              format_location(batch_rule_loc_), "; the second one at ", format_location(loc),
              " is refused");
  const std::string where = c10::str(name_, ": op.vmap at ", format_location(loc), ": ");
  auto find_arg = [&](const std::string& arg) -> const ArgSpec* {
    for (const auto& a : args_) {
      if (a.name == arg) return &a;
    }
    return nullptr;
  };
  if (rule.kind() == BatchRule::Kind::kRows) {
    TORCH_CHECK_VALUE(!rule.row_args().empty(), where, "BatchRule::rows needs a row argument");
    for (const auto& r : rule.row_args()) {
      const ArgSpec* a = find_arg(r);
      TORCH_CHECK_VALUE(a != nullptr, where, "the row argument '", r,
                        "' is not an argument of the schema");
      TORCH_CHECK_VALUE(is_tensor_like(a->kind), where, "the row argument '", r,
                        "' must be Tensor, Tensor? or Tensor[], but is ", a->type);
      TORCH_CHECK_VALUE(!a->written, where, "the row argument '", r,
                        "' is written in place; an op that writes its arguments takes "
                        "BatchRule::loop");
    }
    for (const auto& d : rule.dim_args()) {
      const ArgSpec* a = find_arg(d);
      TORCH_CHECK_VALUE(a != nullptr, where, "the dim argument '", d,
                        "' is not an argument of the schema");
      TORCH_CHECK_VALUE(a->kind == ArgKind::kInt, where, "the dim argument '", d,
                        "' must be int, but is ", a->type);
    }
    for (std::size_t r = 0; r < returns_.size(); ++r) {
      TORCH_CHECK_VALUE(returns_[r] == ArgKind::kTensor || returns_[r] == ArgKind::kTensorList,
                        where, "BatchRule::rows needs Tensor or Tensor[] returns, but return ", r,
                        " is not one (its value would mix the examples); use BatchRule::loop");
    }
  }
  TORCH_CHECK_VALUE(!mutates_ || rule.kind() == BatchRule::Kind::kLoop, where,
                    "an op that writes its arguments takes BatchRule::loop (one call per "
                    "example, each writing its own slice of the batched arguments)");
  batch_rule_ = std::move(rule);
  batch_rule_loc_ = loc;
  auto lib = std::make_unique<torch::Library>(torch::Library::FRAGMENT, ns_, std::nullopt,
                                              loc.file_name(), loc.line());
  lib->impl(name_.substr(name_.find("::") + 2).c_str(),
            torch::dispatch(
                c10::DispatchKey::FuncTorchBatched,
                torch::CppFunction::makeFromBoxedFunctor(std::make_unique<BatchedKernel>(this))));
  if (inplace_handle_) {
    detail::impl_inplace_batched(*lib, inplace_handle_->schema().name().substr(ns_.size() + 2),
                                 this);
  }
  libraries_.push_back(std::move(lib));
}

namespace {

// The in-place variant under vmap: the functional op on the same (batched) arguments, through
// its rule, then copy_ into x, so x keeps its batch dim and each example gets its own result.
// Refused before anything is written when x is not batched at this level but the result is
// (every example's result would land in the one tensor).
struct InplaceBatchedKernel final : c10::OperatorKernel {
  explicit InplaceBatchedKernel(const OpCore* op) : op_(op) {}
  void operator()(const c10::OperatorHandle& /*h*/, c10::DispatchKeySet /*ks*/,
                  torch::jit::Stack* stack) {
    const std::size_t n = op_->args().size();
    const std::string variant = op_->name() + "_";
    const std::string& x = op_->args()[0].name;
    const at::Tensor self = (*stack)[stack->size() - n].toTensor();
    TORCH_CHECK_VALUE(self.defined(), variant, ": argument '", x,
                      "' is None; the in-place variant writes its result into it");
    torch::jit::Stack call(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
    op_->handle().callBoxed(call);
    const at::Tensor result = call.at(0).toTensor();
    const auto layer = at::functorch::maybeCurrentDynamicLayer();
    const int64_t level = layer.has_value() ? layer->layerId() : 0;
    TORCH_CHECK(at::functorch::isBatchedAtLevel(self, level) ||
                    !at::functorch::isBatchedAtLevel(result, level),
                variant, ": vmap: argument '", x,
                "' is not batched, but another argument is, so the result differs per example "
                "and cannot be written into '",
                x, "' (nothing was written); batch '", x, "' too, or call ", op_->name());
    detail::check_result_fits(variant, op_->name(), x, result, self);
    self.copy_(result);
    torch::jit::drop(*stack, n);
    stack->emplace_back(self);
  }
  const OpCore* op_;
};

}  // namespace

void detail::impl_inplace_batched(torch::Library& lib, const std::string& variant,
                                  const OpCore* op) {
  lib.impl(variant.c_str(), torch::dispatch(c10::DispatchKey::FuncTorchBatched,
                                            torch::CppFunction::makeFromBoxedFunctor(
                                                std::make_unique<InplaceBatchedKernel>(op))));
}

namespace {

struct Unwrapped {
  at::Tensor value;
  std::optional<int64_t> bdim;  // where the batch dim is in `value`, when batched
};

Unwrapped unwrap(const at::Tensor& t, int64_t level) {
  if (!t.defined() || !at::functorch::isBatchedAtLevel(t, level)) return {t, std::nullopt};
  auto [value, bdim] = at::functorch::unwrapTensorAtLevel(t, level);
  return {value, bdim};
}

// The whole batch, batch dim first, `rank` logical dims after it (size-1 dims inserted after
// the batch dim for a lower rank); an unbatched tensor is expanded to `batch` (stride 0).
at::Tensor to_rows(const Unwrapped& u, int64_t batch, int64_t rank) {
  at::Tensor t = u.bdim ? u.value.movedim(*u.bdim, 0) : u.value.unsqueeze(0);
  const int64_t logical = t.dim() - 1;
  for (int64_t k = logical; k < rank; ++k) t = t.unsqueeze(1);
  if (!u.bdim) {
    std::vector<c10::SymInt> sizes(t.sym_sizes().begin(), t.sym_sizes().end());
    sizes[0] = batch;
    t = t.expand_symint(sizes);
  }
  return t;
}

// The argument a return of the schema writes (Tensor(a!) ... -> Tensor(a!)), or nullopt for a
// return that aliases no written argument.
std::optional<std::size_t> written_argument(const c10::FunctionSchema& schema, std::size_t r,
                                            const std::string& name) {
  const auto* alias = schema.returns()[r].alias_info();
  if (alias == nullptr || !alias->isWrite()) return std::nullopt;
  const auto& args = schema.arguments();
  std::size_t i = 0;
  while (i < args.size() &&
         !(args[i].alias_info() && args[i].alias_info()->beforeSets() == alias->beforeSets())) {
    ++i;
  }
  TORCH_INTERNAL_ASSERT(i < args.size(), name, ": return ", r, " aliases no argument");
  return i;
}

// vmap over a batch of size 0 under BatchRule::loop: torch.func.jacrev of a function whose
// output has no elements vmaps the VJP (the backward op) over those 0 elements. No example
// exists to call the op on, so it runs once on the Meta device, on one example's shapes, and
// each tensor return becomes the empty batch [0, *example shape] of that dtype on the device
// of the batched arguments; a written argument is returned as it came (nothing is written).
// Needs tensor returns only (a count over an example's data has no value for zero examples;
// checked first) and a Meta kernel (the op's shape function or fake kernel); else c10::Error
// naming the op.
void call_empty_batch(const c10::OperatorHandle& h, torch::jit::Stack* stack,
                      const std::string& name, const c10::FunctionSchema& schema,
                      const std::vector<std::vector<Unwrapped>>& unwrapped, int64_t level) {
  const std::size_t n = unwrapped.size();
  const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);
  for (std::size_t r = 0; r < schema.returns().size(); ++r) {
    const c10::TypePtr& type = schema.returns()[r].type();
    TORCH_CHECK(type->isSubtypeOf(*c10::TensorType::get()) ||
                    type->isSubtypeOf(*c10::ListType::ofTensors()),
                name, ": vmap over a batch of size 0: return ", r, " is a ", type->str(),
                ", which has no value for zero examples (only tensor returns can be batched "
                "empty)");
  }
  std::optional<c10::Device> device;
  auto example = [&](const Unwrapped& u) {
    if (!u.value.defined()) return u.value;
    std::vector<c10::SymInt> sizes(u.value.sym_sizes().begin(), u.value.sym_sizes().end());
    if (u.bdim) {
      sizes.erase(sizes.begin() + *u.bdim);
      if (!device) device = u.value.device();
    }
    return at::empty_symint(sizes, u.value.options().device(c10::kMeta));
  };
  torch::jit::Stack call;
  call.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const c10::IValue& v = first[static_cast<std::ptrdiff_t>(i)];
    if (v.isTensor()) {
      call.emplace_back(example(unwrapped[i][0]));
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> list;
      for (const auto& u : unwrapped[i]) list.push_back(example(u));
      call.emplace_back(std::move(list));
    } else {
      call.push_back(v);
    }
  }
  try {
    h.callBoxed(&call);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, name,
                ": vmap over a batch of size 0: with no example to call the op on, it runs on "
                "the Meta device for its outputs' shapes, and that failed (define a shape "
                "function or a fake kernel to give it one): ",
                e.what_without_backtrace());
  }
  const std::size_t num_returns = schema.returns().size();
  torch::jit::Stack out;
  for (std::size_t r = 0; r < num_returns; ++r) {
    const c10::IValue& v = call[r];
    if (const auto i = written_argument(schema, r, name)) {
      out.push_back(first[static_cast<std::ptrdiff_t>(*i)]);  // nothing was written
      continue;
    }
    auto empty_batch = [&](const at::Tensor& t) {
      if (!t.defined()) return t;
      std::vector<c10::SymInt> sizes{c10::SymInt(0)};
      sizes.insert(sizes.end(), t.sym_sizes().begin(), t.sym_sizes().end());
      return at::functorch::makeBatched(
          at::empty_symint(sizes, t.options().device(device.value_or(c10::kCPU))), int64_t{0},
          level);
    };
    if (v.isTensor()) {
      out.emplace_back(empty_batch(v.toTensor()));
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> list = v.toTensorVector();
      for (auto& t : list) t = empty_batch(t);
      out.emplace_back(std::move(list));
    } else {
      out.push_back(v);  // not reached: every return was checked to be a tensor above
    }
  }
  torch::jit::drop(*stack, n);
  for (auto& v : out) stack->push_back(std::move(v));
}

}  // namespace

void OpCore::batched_kernel(const c10::OperatorHandle& h, torch::jit::Stack* stack) const {
  const auto layer = at::functorch::maybeCurrentDynamicLayer();
  TORCH_INTERNAL_ASSERT(layer.has_value(), name_, ": FuncTorchBatched kernel outside vmap");
  const int64_t level = layer->layerId();
  const std::size_t n = args_.size();
  const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);

  // Every argument, unwrapped at this level: one entry per tensor (list elements in order).
  std::vector<std::vector<Unwrapped>> unwrapped(n);
  std::optional<int64_t> batch;
  std::vector<bool> batched(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    const c10::IValue& v = first[static_cast<std::ptrdiff_t>(i)];
    std::vector<at::Tensor> tensors;
    if (v.isTensor()) {
      tensors.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      tensors = v.toTensorVector();
    } else {
      continue;
    }
    for (const auto& t : tensors) {
      Unwrapped u = unwrap(t, level);
      if (u.bdim) {
        batched[i] = true;
        const int64_t b = u.value.size(*u.bdim);
        TORCH_CHECK(!batch || *batch == b, name_, ": vmap: argument '", args_[i].name,
                    "' has batch size ", b, " but another argument has ", *batch);
        batch = b;
      }
      unwrapped[i].push_back(std::move(u));
    }
  }
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::FuncTorchBatched);
  if (!batch) {
    h.callBoxed(stack);  // nothing is batched at this level
    return;
  }
  const std::size_t num_returns = returns_.size();

  // ---- general: the user's function, batched tensors with the batch at dim 0 ----
  if (batch_rule_->kind() == BatchRule::Kind::kGeneral) {
    std::vector<std::string> names;
    std::vector<std::vector<bool>> which(n);
    names.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      names.push_back(args_[i].name);
      c10::IValue& v = first[static_cast<std::ptrdiff_t>(i)];
      auto front = [](const Unwrapped& u) {
        return u.bdim ? u.value.movedim(*u.bdim, 0) : u.value;
      };
      for (const auto& u : unwrapped[i]) which[i].push_back(u.bdim.has_value());
      if (v.isTensor()) {
        v = front(unwrapped[i][0]);
      } else if (v.isTensorList()) {
        std::vector<at::Tensor> list;
        list.reserve(unwrapped[i].size());
        for (const auto& u : unwrapped[i]) list.push_back(front(u));
        v = c10::IValue(std::move(list));
      }
    }
    const BatchInfo info(*batch, std::move(names), std::move(which));
    batch_rule_->general_fn()(*stack, info);
    std::size_t r = 0;
    auto wrap = [&](const at::Tensor& t) {
      if (!t.defined()) return t;
      TORCH_CHECK(t.dim() >= 1 && t.size(0) == *batch, name_, ": the batching rule (op.vmap at ",
                  format_location(batch_rule_loc_), ") returned a tensor of shape ", t.sizes(),
                  " for return ", r, "; a rule returns the batch of ", *batch,
                  " examples at dim 0");
      return at::functorch::makeBatched(t, int64_t{0}, level);
    };
    for (auto it = stack->end() - static_cast<std::ptrdiff_t>(num_returns); it != stack->end();
         ++it, ++r) {
      if (it->isTensor()) {
        *it = wrap(it->toTensor());
      } else if (it->isTensorList()) {
        std::vector<at::Tensor> list = it->toTensorVector();
        for (auto& t : list) t = wrap(t);
        *it = c10::IValue(std::move(list));
      }
    }
    return;
  }

  // ---- rows: one call for the whole batch ----
  const auto& dim_args = batch_rule_->dim_args();
  auto is_dim_arg = [&](std::size_t i) {
    return std::find(dim_args.begin(), dim_args.end(), args_[i].name) != dim_args.end();
  };
  bool rows = batch_rule_->kind() == BatchRule::Kind::kRows;
  std::vector<bool> is_row(n, false);
  int64_t rank = -1;
  if (rows) {
    for (const auto& r : batch_rule_->row_args()) {
      for (std::size_t i = 0; i < n; ++i) is_row[i] = is_row[i] || args_[i].name == r;
    }
    for (std::size_t i = 0; i < n && rows; ++i) {
      if (batched[i] && !is_row[i]) rows = false;  // a per-example non-row tensor: loop
    }
    // The first row tensor sets the rank; a row tensor of higher rank: loop.
    for (const auto& r : batch_rule_->row_args()) {
      for (std::size_t i = 0; i < n; ++i) {
        if (args_[i].name != r) continue;
        for (const auto& u : unwrapped[i]) {
          const int64_t logical = u.value.dim() - (u.bdim ? 1 : 0);
          if (rank < 0) rank = logical;
          rows = rows && logical <= rank;
        }
      }
    }
  }
  // 0-d examples: the batch would become one row of the op (rms_norm would normalize across
  // the examples); loop, so each example gets the op's own answer (or its own error).
  rows = rows && rank >= 1;
  // A dim argument outside [-rank, rank) would name the batch dim (or be checked against the
  // batched rank in the op's error message); loop, so the op sees and names the user's value.
  if (rows) {
    for (std::size_t i = 0; i < n && rows; ++i) {
      const c10::IValue& v = first[static_cast<std::ptrdiff_t>(i)];
      if (is_dim_arg(i) && v.isInt()) rows = v.toInt() >= -rank && v.toInt() < rank;
    }
  }
  if (rows) {
    for (std::size_t i = 0; i < n; ++i) {
      c10::IValue& v = first[static_cast<std::ptrdiff_t>(i)];
      if (is_row[i]) {
        if (v.isTensor()) {
          v = to_rows(unwrapped[i][0], *batch, rank);
        } else if (v.isTensorList()) {
          std::vector<at::Tensor> list;
          list.reserve(unwrapped[i].size());
          for (const auto& u : unwrapped[i]) list.push_back(to_rows(u, *batch, rank));
          v = c10::IValue(std::move(list));
        }
      } else if (v.isInt() && is_dim_arg(i) && v.toInt() >= 0) {
        v = c10::IValue(v.toInt() + 1);
      } else if (v.isTensor()) {
        v = unwrapped[i][0].value;  // unbatched at this level (checked above)
      }
    }
    h.callBoxed(stack);
    for (auto it = stack->end() - static_cast<std::ptrdiff_t>(num_returns); it != stack->end();
         ++it) {
      if (it->isTensor()) {
        *it = at::functorch::makeBatched(it->toTensor(), int64_t{0}, level);
      } else if (it->isTensorList()) {
        std::vector<at::Tensor> list = it->toTensorVector();
        for (auto& t : list) t = at::functorch::makeBatched(t, int64_t{0}, level);
        *it = c10::IValue(std::move(list));
      }
    }
    return;
  }

  // ---- loop: one call per example ----
  if (*batch == 0) {
    call_empty_batch(h, stack, name_, schema_, unwrapped, level);
    return;
  }
  // An op that writes its arguments: each example writes its own slice of a batched written
  // argument (a view into it). An unbatched written argument would take every example's write.
  for (std::size_t i = 0; i < n && mutates_; ++i) {
    if (!args_[i].written) continue;
    for (const auto& u : unwrapped[i]) {
      if (!u.value.defined() || u.bdim) continue;
      std::string other;
      for (std::size_t k = 0; k < n && other.empty(); ++k) {
        if (batched[k]) other = args_[k].name;
      }
      TORCH_CHECK(false, name_, ": vmap: argument '", args_[i].name,
                  "' is written in place but not batched, while argument '", other,
                  "' is: every example would write into the same tensor (nothing was written). "
                  "Batch '",
                  args_[i].name, "' too, or call the op outside vmap");
    }
    for (const auto& u : unwrapped[i]) {
      // Each example's slice may be free of overlap while the batch is not (an argument
      // expanded along the batch dim): the examples would overwrite each other.
      TORCH_CHECK(!u.value.defined() || at::has_internal_overlap(u.value) != at::MemOverlap::Yes,
                  name_, ": vmap: argument '", args_[i].name,
                  "' is written in place, but several of its elements share one memory location "
                  "across the batch (expanded, stride 0; strides ",
                  u.value.strides(),
                  "), so the examples would overwrite each other (nothing was written). Pass a "
                  "tensor that owns its elements (.contiguous())");
    }
  }
  const torch::jit::Stack args(first, stack->end());
  torch::jit::drop(*stack, n);
  std::vector<torch::jit::Stack> results;
  results.reserve(static_cast<std::size_t>(*batch));
  for (int64_t b = 0; b < *batch; ++b) {
    torch::jit::Stack call;
    call.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const c10::IValue& v = args[i];
      auto slice = [&](const Unwrapped& u) {
        return u.bdim ? u.value.select(*u.bdim, b) : u.value;
      };
      if (v.isTensor()) {
        call.emplace_back(slice(unwrapped[i][0]));
      } else if (v.isTensorList()) {
        std::vector<at::Tensor> list;
        list.reserve(unwrapped[i].size());
        for (const auto& u : unwrapped[i]) list.push_back(slice(u));
        call.emplace_back(std::move(list));
      } else {
        call.push_back(v);
      }
    }
    if (mutates_ && b > 0) {
      try {
        h.callBoxed(&call);
      } catch (c10::Error& e) {
        const std::string before =
            b == 1 ? std::string("example 0 had already written its slices")
                   : c10::str("examples 0 to ", b - 1, " had already written their slices");
        e.add_context(c10::str(name_,
                               ": vmap ran one call per example (BatchRule::loop); this error is "
                               "example ",
                               b, "'s of ", *batch, ", and ", before));
        throw;
      }
    } else {
      h.callBoxed(&call);
    }
    results.push_back(std::move(call));
  }
  for (std::size_t r = 0; r < num_returns; ++r) {
    const c10::IValue& r0 = results[0][r];
    if (const auto i = written_argument(schema_, r, name_)) {
      // The return is a written argument: the batched argument itself, now holding every
      // example's write.
      stack->push_back(args[*i]);
      continue;
    }
    if (r0.isTensor()) {
      std::vector<at::Tensor> per_example;
      per_example.reserve(results.size());
      for (const auto& res : results) per_example.push_back(res[r].toTensor());
      stack->emplace_back(at::functorch::makeBatched(at::stack(per_example), int64_t{0}, level));
    } else if (r0.isTensorList()) {
      const std::size_t len = r0.toTensorList().size();
      std::vector<at::Tensor> out;
      out.reserve(len);
      for (std::size_t k = 0; k < len; ++k) {
        std::vector<at::Tensor> per_example;
        for (const auto& res : results) {
          const auto list = res[r].toTensorVector();
          TORCH_CHECK(list.size() == len, name_, ": vmap: return ", r,
                      " is a list of different lengths across the batch");
          per_example.push_back(list[k]);
        }
        out.push_back(at::functorch::makeBatched(at::stack(per_example), int64_t{0}, level));
      }
      stack->emplace_back(std::move(out));
    } else {
      for (const auto& res : results) {
        TORCH_CHECK(c10::_fastEqualsForContainer(res[r], r0), name_, ": vmap: return ", r, " (",
                    r0.tagKind(), ") differs across the batch (", r0, " and ", res[r],
                    "); a non-tensor return cannot be batched");
      }
      stack->push_back(r0);
    }
  }
}

}  // namespace customop
